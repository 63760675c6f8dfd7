//! What every Ballast crate shares and none may write a second copy of (a second copy is a bug waiting in the
//! copy that was not fixed):
//!
//! - [`durable`]: the one way to replace a file so a crash leaves the old file or the new one, never a torn one.
//! - [`retry`]: the one retry policy (bounded attempts, a total deadline, jitter), on `backon`.
//! - [`error_chain`]: an error with its causes, in one line, for messages and logs.
//! - [`table`]: the one table writer (aligned columns under a header, as kubectl prints them), on `comfy-table`.
//!
//! It depends on nothing of Ballast's, so the lowest crate can use it; it does I/O ([`durable`]) and so the pure
//! spec crate does not depend on it.

pub mod durable;
pub mod retry;
pub mod table;

/// An error with its whole chain of causes, `top: cause: cause`, for messages: hyper's and the AWS SDK's errors say
/// little at the top ("dispatch failure", "service error"). A cause whose text the line already ends with is not
/// repeated (many errors print their source in their own message).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !cause_text.is_empty() && !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Layer {
        text: &'static str,
        source: Option<Box<Layer>>,
    }

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.text)
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.source
                .as_deref()
                .map(|s| s as &(dyn std::error::Error + 'static))
        }
    }

    fn layers(texts: &[&'static str]) -> Layer {
        let mut iter = texts.iter().rev();
        let mut layer = Layer {
            text: iter.next().copied().unwrap_or(""),
            source: None,
        };
        for text in iter {
            layer = Layer {
                text,
                source: Some(Box::new(layer)),
            };
        }
        layer
    }

    #[test]
    fn chain_joins_every_cause() {
        let e = layers(&["dispatch failure", "io error", "connection refused"]);
        assert_eq!(
            error_chain(&e),
            "dispatch failure: io error: connection refused"
        );
    }

    #[test]
    fn chain_skips_a_cause_the_message_already_ends_with() {
        let e = layers(&["reading x: permission denied", "permission denied"]);
        assert_eq!(error_chain(&e), "reading x: permission denied");
        let io = std::io::Error::other("plain");
        assert_eq!(error_chain(&io), "plain");
    }
}
