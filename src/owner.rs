//! The rules of an owner label (who holds, in words), shared by the service,
//! which checks the label a request sends, and the client tools, which make
//! one from the host, the process and the command.

/// Whether `c` may not appear in an owner label: a control character
/// (Unicode category Cc), or an invisible one that would hide or reorder
/// the text around it where the label is shown (zero-width characters,
/// bidirectional embeddings, overrides and isolates, word joiners, the
/// byte order mark).
pub fn unprintable(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200B}'..='\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{206F}'
                | '\u{FEFF}'
        )
}

/// The longest owner label accepted, in bytes.
pub const MAX_OWNER: usize = 200;
