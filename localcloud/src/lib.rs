//! Ballast's local cloud: AWS emulated over HTTP (moto, patched by the project's launcher), one IMDSv2
//! endpoint per emulated instance, and an instance runner that boots `nodeup` for every running instance.

pub mod emulator;
