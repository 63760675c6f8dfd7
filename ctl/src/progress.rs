//! Progress of long work (a roll, a delete) on stderr, chosen once for every command: a bar for a person at a
//! terminal, the plain stage lines otherwise (piped, redirected, `TERM=dumb`, or `-o json`, whose reader is a
//! program). The lines are the same text either way: on a terminal they are printed above the bar, so the bar
//! only adds how far the work is and what it is doing now.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often the bar is redrawn while nothing moves, so its clock keeps running through a long wait.
const TICK: Duration = Duration::from_millis(250);
/// `{msg}` is what is being done now; `{pos}/{len}` counts in the command's own unit (instances, resources).
const TEMPLATE: &str = "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {prefix} {wide_msg}";

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Display {
    /// A bar redrawn in place, with the stage lines printed above it.
    Bar,
    /// The stage lines only, one per line.
    Lines,
}

/// The one choice of display: a bar only when stderr is a terminal that can redraw (`TERM` is not `dumb`) and the
/// command's output is not JSON.
pub fn choose(stderr_is_terminal: bool, term: Option<&str>, json_output: bool) -> Display {
    if stderr_is_terminal && term != Some("dumb") && !json_output {
        Display::Bar
    } else {
        Display::Lines
    }
}

/// Progress of one long piece of work on stderr.
#[derive(Debug)]
pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// Progress for this process's stderr, `total` units of work (`unit`: "instances replaced", ...).
    pub fn on_stderr(total: u64, unit: &str, json_output: bool) -> Self {
        let term = std::env::var("TERM").ok();
        let display = choose(
            std::io::stderr().is_terminal(),
            term.as_deref(),
            json_output,
        );
        Self::new(display, total, unit)
    }

    /// Plain lines only, whatever stderr is.
    pub fn lines() -> Self {
        Progress { bar: None }
    }

    pub fn new(display: Display, total: u64, unit: &str) -> Self {
        let bar = match display {
            Display::Lines => None,
            Display::Bar => {
                // The template is a constant; should indicatif ever refuse it, its default bar still counts.
                let style = ProgressStyle::with_template(TEMPLATE)
                    .unwrap_or_else(|_| ProgressStyle::default_bar());
                let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr())
                    .with_style(style)
                    .with_prefix(unit.to_string());
                bar.enable_steady_tick(TICK);
                Some(bar)
            }
        };
        Progress { bar }
    }

    pub fn display(&self) -> Display {
        if self.bar.is_some() {
            Display::Bar
        } else {
            Display::Lines
        }
    }

    /// A stage line: above the bar on a terminal, a plain line on stderr otherwise.
    pub fn line(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.println(text),
            None => eprintln!("{text}"),
        }
    }

    /// What is being done now, beside the bar (plain lines already say it).
    pub fn current(&self, what: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(what.to_string());
        }
    }

    /// `done` of the total are done.
    pub fn set_done(&self, done: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(done);
        }
    }

    /// `n` more are done.
    pub fn add_done(&self, n: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(n);
        }
    }

    /// The total grew (a delete finds more as it goes).
    pub fn set_total(&self, total: u64) {
        if let Some(bar) = &self.bar {
            bar.set_length(total);
        }
    }
}

impl Drop for Progress {
    /// The bar goes away however the work ends, so a summary or an error after it starts on a clean line.
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bar_only_for_a_terminal_that_can_redraw_and_output_that_is_not_json() {
        assert_eq!(choose(true, Some("xterm-256color"), false), Display::Bar);
        assert_eq!(choose(true, None, false), Display::Bar);
        // Piped or redirected (the e2e tests, CI logs, `2> file`): the plain lines they match on.
        assert_eq!(choose(false, Some("xterm-256color"), false), Display::Lines);
        assert_eq!(choose(false, None, false), Display::Lines);
        // -o json: a program reads the output, even when a person watches the terminal.
        assert_eq!(choose(true, Some("xterm"), true), Display::Lines);
        // A terminal that cannot move the cursor would print every redraw.
        assert_eq!(choose(true, Some("dumb"), false), Display::Lines);
    }

    #[test]
    fn plain_progress_has_no_bar_and_counting_on_it_is_harmless() {
        let progress = Progress::new(Display::Lines, 10, "instances replaced");
        assert_eq!(progress.display(), Display::Lines);
        progress.current("nodes: i-1: terminating");
        progress.add_done(1);
        progress.set_done(2);
        progress.set_total(12);
        assert!(progress.bar.is_none());
    }

    #[test]
    fn a_bar_counts_what_is_done_of_the_total() {
        // Drawn to a hidden target here: the test checks the counts, not a terminal.
        let progress = Progress::new(Display::Bar, 4, "instances replaced");
        let bar = progress.bar.clone().expect("a bar");
        bar.set_draw_target(ProgressDrawTarget::hidden());
        progress.add_done(1);
        progress.add_done(2);
        assert_eq!(bar.position(), 3);
        progress.set_total(6);
        assert_eq!(bar.length(), Some(6));
        progress.set_done(5);
        assert_eq!(bar.position(), 5);
        assert_eq!(progress.display(), Display::Bar);
    }
}
