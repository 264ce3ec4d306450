//! How the page shows an id that can be any length: whole when short, else cut with its
//! length. The decisions' request ids and the Completions panel's worker ids go through
//! the same rule, so it sits below both [`super::page`] and [`super::completions`].

/// The longest request id the page shows whole; a longer one is cut to
/// [`REQUEST_ID_KEPT_BYTES`] (ids have no length limit, and a page repeats each id up to
/// five times per policy: the budget is bytes, not decisions).
pub const REQUEST_ID_SHOWN_MAX_BYTES: usize = 64;
const REQUEST_ID_KEPT_BYTES: usize = 40;

/// A request id as the page shows it: whole up to [`REQUEST_ID_SHOWN_MAX_BYTES`], else
/// its first [`REQUEST_ID_KEPT_BYTES`] (at a character boundary), an ellipsis and its
/// length, so two cut ids still read as different requests by their seq.
pub fn shown_request_id(id: &str) -> String {
    if id.len() <= REQUEST_ID_SHOWN_MAX_BYTES {
        return id.to_owned();
    }
    let mut end = REQUEST_ID_KEPT_BYTES;
    while !id.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &id[..end], id.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_request_ids_are_shown_cut_with_their_length() {
        assert_eq!(shown_request_id("r1"), "r1");
        let exact = "x".repeat(REQUEST_ID_SHOWN_MAX_BYTES);
        assert_eq!(shown_request_id(&exact), exact);
        let long = format!("{}{}", "é".repeat(30), "y".repeat(100));
        // 40 bytes of two-byte characters: 20 of them, at a character boundary.
        assert_eq!(
            shown_request_id(&long),
            format!("{}… (160 bytes)", "é".repeat(20))
        );
        let odd = format!("a{long}");
        assert_eq!(
            shown_request_id(&odd),
            format!("a{}… (161 bytes)", "é".repeat(19))
        );
    }
}
