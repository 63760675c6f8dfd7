//! The harness of Ballast's end-to-end tests: real processes on free loopback ports, torn down even when a
//! test fails (Drop guards; the emulator also exits when its parent test process does).

pub mod aws;
pub mod binaries;
pub mod cluster_etcd;
pub mod etcd_writer;
pub mod front;
pub mod go_builds;
pub mod image;
pub mod kube_machines;
pub mod kubernetes_made;
pub mod leftovers;
pub mod lifecycle;
pub mod local_ami;
pub mod localcloud;
pub mod operator;
pub mod partition;
pub mod reports;
pub mod wait;
