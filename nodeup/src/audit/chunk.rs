//! Where a chunk ends, pure: whole lines only, at most `max` bytes, except a single line longer than `max`,
//! which is shipped alone rather than split (a chunk is always whole JSON lines).

/// The length of the chunk that starts `window` (bytes read from the position onwards), or `None` when
/// nothing can be shipped yet. `rotated`: the window runs to the end of a file that no longer grows, so a last
/// line without its newline is shipped too.
pub fn chunk_len(window: &[u8], max: usize, rotated: bool) -> Option<usize> {
    if window.is_empty() {
        return None;
    }
    let limit = window.len().min(max);
    // The last newline within the limit ends the chunk.
    if let Some(last) = window[..limit].iter().rposition(|&b| b == b'\n') {
        return Some(last + 1);
    }
    if window.len() <= max && rotated {
        return Some(window.len());
    }
    // No newline within `max`: the first line is longer than a chunk; it goes alone, once it is complete.
    match window.iter().position(|&b| b == b'\n') {
        Some(end) => Some(end + 1),
        None if rotated => Some(window.len()),
        None => None,
    }
}

/// How many bytes of complete lines (or, in a rotated file, of everything) the window holds: what is waiting.
pub fn complete_len(window: &[u8], rotated: bool) -> usize {
    if rotated {
        return window.len();
    }
    window
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |last| last + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_is_whole_lines_within_the_cap() {
        let window = b"aaaa\nbbbb\ncccc\n";
        assert_eq!(chunk_len(window, 100, false), Some(15));
        assert_eq!(chunk_len(window, 12, false), Some(10));
        assert_eq!(chunk_len(window, 10, false), Some(10));
        assert_eq!(chunk_len(window, 9, false), Some(5));
    }

    #[test]
    fn a_partial_last_line_waits_in_the_live_file_and_ships_in_a_rotated_one() {
        assert_eq!(chunk_len(b"aaaa\nbb", 100, false), Some(5));
        assert_eq!(chunk_len(b"bb", 100, false), None);
        assert_eq!(chunk_len(b"aaaa\nbb", 100, true), Some(5));
        assert_eq!(chunk_len(b"bb", 100, true), Some(2));
        assert_eq!(complete_len(b"aaaa\nbb", false), 5);
        assert_eq!(complete_len(b"aaaa\nbb", true), 7);
        assert_eq!(complete_len(b"bb", false), 0);
    }

    #[test]
    fn a_line_longer_than_a_chunk_goes_alone_once_complete() {
        assert_eq!(chunk_len(b"aaaaaaaaaa\nb\n", 4, false), Some(11));
        assert_eq!(chunk_len(b"aaaaaaaaaa", 4, false), None);
        assert_eq!(chunk_len(b"aaaaaaaaaa", 4, true), Some(10));
        assert_eq!(chunk_len(b"", 4, true), None);
    }

    /// Cutting a file into chunks and joining them gives the file back, whatever the cap: nothing lost, nothing
    /// twice.
    #[test]
    fn chunks_joined_are_the_lines() {
        let text: Vec<u8> = (0..200)
            .map(|i| format!("{{\"n\":{i},\"pad\":\"{}\"}}\n", "x".repeat(i % 37)))
            .collect::<String>()
            .into_bytes();
        for max in [1, 16, 64, 1000, 100_000] {
            let mut joined = Vec::new();
            let mut at = 0;
            while let Some(len) = chunk_len(&text[at..], max, false) {
                assert!(len <= max || !text[at..at + len - 1].contains(&b'\n'));
                joined.extend_from_slice(&text[at..at + len]);
                at += len;
            }
            assert_eq!(joined, text, "cap {max}");
        }
    }

    /// After a crash between an upload and the position's write, the same sequence number is cut again from
    /// the same offset: the new chunk starts with the old one, so overwriting its key loses and repeats
    /// nothing.
    #[test]
    fn a_chunk_cut_again_later_starts_with_the_first_cut() {
        let early = b"one\ntwo\nthr";
        let later = b"one\ntwo\nthree\nfour\n";
        for max in [4, 8, 12, 100] {
            let first = chunk_len(early, max, false).expect("a chunk");
            let again = chunk_len(later, max, false).expect("a chunk");
            assert!(again >= first, "cap {max}");
            assert_eq!(&later[..first], &early[..first]);
        }
    }
}
