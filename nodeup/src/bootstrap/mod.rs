//! Node identity, verified (issue 16): workers hold no shared bootstrap secret. A control-plane node serves a
//! small HTTPS service ([`server`], on [`PORT`]); a worker proves which instance it is with an
//! `sts:GetCallerIdentity` request signed by its instance-role credentials ([`sts`], [`client`]), and gets a
//! kubelet client certificate for exactly its own node name ([`issue`]) when STS, EC2 and IAM agree
//! ([`verify`]). The model is kops-controller's on AWS (`upup/pkg/fi/cloudup/awsup/aws_verifier.go`).
//! docs/node-identity.md is the long form.
//!
//! Pure: [`wire`], [`sts`] (signing is pure given the credentials and the clock), [`verify`], [`issue`]. I/O:
//! [`server`], [`client`], [`directory`] (where workers find the service).

pub mod client;
pub mod directory;
pub mod issue;
pub mod server;
pub mod sts;
pub mod verify;
pub mod wire;

/// The service's port on every control-plane node (kops-controller's), open to the nodes' security group.
pub const PORT: u16 = 3988;
/// The one route: POST a [`wire::CertificateRequest`], get a [`wire::CertificateResponse`].
pub const PATH: &str = "/v1/node-certificate";

/// An error with its causes, for messages (hyper's and the SDK's errors say little at the top).
pub(crate) use ballast_common::error_chain;
