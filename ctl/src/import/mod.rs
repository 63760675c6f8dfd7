//! `ballast import`: other tools' cluster specs mapped to Ballast's, purely (the command reads the files and
//! writes the store). `kops` reads kops's `kops.k8s.io/v1alpha2` objects.

pub mod kops;
