//! Errors about the spec itself: each names the object, the field's path and what is wrong.

use std::fmt;

use crate::terminal::{escape_controls, escape_controls_keeping_lines};

/// One problem with one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// `Cluster/demo.example.com`, `InstanceGroup/nodes`, or a document label when the object has no name.
    pub object: String,
    /// `spec.subnets[1].cidr`; empty when the problem is the whole object.
    pub path: String,
    pub message: String,
}

impl FieldError {
    pub fn new(object: &str, path: &str, message: impl Into<String>) -> Self {
        FieldError {
            object: object.to_string(),
            path: path.to_string(),
            message: message.into(),
        }
    }
}

/// Shown with every control character of the object, path and message escaped (`crate::terminal`): an object's
/// name and a path's keys come from the operator's input, and an error is printed on their terminal.
impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let object = escape_controls(&self.object);
        let message = escape_controls_keeping_lines(&self.message);
        if self.path.is_empty() {
            write!(f, "{object}: {message}")
        } else {
            write!(f, "{object}: {}: {message}", escape_controls(&self.path))
        }
    }
}

/// Every problem found in one source (a file, or the spec kept in the state store).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecErrors {
    pub source: String,
    pub errors: Vec<FieldError>,
}

impl SpecErrors {
    pub fn new(source: &str, errors: Vec<FieldError>) -> Self {
        SpecErrors {
            source: source.to_string(),
            errors,
        }
    }
}

impl fmt::Display for SpecErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.errors.len();
        write!(
            f,
            "{}: {n} error{} in the spec",
            escape_controls(&self.source),
            if n == 1 { "" } else { "s" }
        )?;
        for error in &self.errors {
            write!(f, "\n  {error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for SpecErrors {}
