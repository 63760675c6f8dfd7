//! Termination the cluster sees coming (`spec.terminationHandling`, `docs/termination.md`): the handler that runs
//! on every control-plane node (as kops runs its node termination handler in queue mode on the control plane).
//!
//! - `event` (pure): the five kinds of EventBridge event in the cluster's queue, read into typed notices;
//! - `decide` (pure): per instance, drain a worker, stop a control-plane node's etcd member, complete, or nothing;
//! - `handler`: the queue's long poll, EC2's look-up, the drain (`ballast_drain`, shared with `rolling-update`),
//!   the stop request, lifecycle heartbeats and completion, the message deleted once handled;
//! - `stop`: a control-plane node's watch of its own stop request, answered once its supervisor stopped etcd.

pub mod decide;
pub mod event;
pub mod handler;
pub mod stop;
