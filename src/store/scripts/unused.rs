//! Leaves out of a script the shared functions it never calls.
//!
//! A script is several files joined, and the shared files define every
//! function any script of the family needs. Lua runs a script's top level
//! on every call, and each `local function` there makes a closure each
//! time: a release that calls a handful of the semaphore's functions paid
//! for defining all of them (the book's "Benchmark" chapter, "Only the
//! functions a script calls"). So each script is built from its files with
//! only the top-level functions that what it runs can reach.
//!
//! What counts as a shared function is narrow on purpose: a line that
//! starts with `local function <name>(` at column 0, up to the first line
//! that is exactly `end`. Everything else is kept. A function is kept when
//! its name appears as a name in the code that is kept (the top level, or
//! a kept function's body), strings and comments aside; a name that merely
//! looks like a call, or shadows the function, keeps it too, which only
//! costs what it cost before. A script whose layout is not as described is
//! kept whole.

use std::collections::{HashMap, HashSet};

/// The script without the top-level functions it cannot reach (the whole
/// script when its layout is not the one described above).
pub fn without_unused_functions(source: &str) -> String {
    match split(source) {
        Some(pieces) => join_reachable(&pieces),
        None => source.to_owned(),
    }
}

/// A piece of a script: top-level code, or one top-level function.
#[derive(Debug)]
pub(super) enum Piece<'a> {
    Code(&'a str),
    Function { name: &'a str, text: &'a str },
}

/// Splits a script into its pieces, line by line; None when a top-level
/// function has no closing `end` line or a line of its body starts at
/// column 0 (some layout this module does not know).
pub(super) fn split(source: &str) -> Option<Vec<Piece<'_>>> {
    let mut pieces = Vec::new();
    let mut code_start = 0;
    let mut function: Option<(&str, usize)> = None;
    let mut at = 0;
    for line in source.split_inclusive('\n') {
        let start = at;
        at += line.len();
        let bare = line.trim_end_matches(['\n', '\r']);
        match function {
            Some((name, from)) => {
                if bare == "end" {
                    pieces.push(Piece::Function {
                        name,
                        text: &source[from..at],
                    });
                    function = None;
                    code_start = at;
                } else if bare.starts_with(|c: char| !c.is_whitespace()) && !bare.starts_with("--")
                {
                    return None;
                }
            }
            None => {
                if let Some(name) = function_name(bare) {
                    if code_start < start {
                        pieces.push(Piece::Code(&source[code_start..start]));
                    }
                    function = Some((name, start));
                }
            }
        }
    }
    if function.is_some() {
        return None;
    }
    if code_start < source.len() {
        pieces.push(Piece::Code(&source[code_start..]));
    }
    Some(pieces)
}

/// `name` of a line `local function name(...`, else None.
fn function_name(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("local function ")?;
    let end = rest.find('(')?;
    let name = &rest[..end];
    (!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .then_some(name)
}

/// Joins the top-level code and the functions it reaches, in their order.
fn join_reachable(pieces: &[Piece<'_>]) -> String {
    let bodies: HashMap<&str, &str> = pieces
        .iter()
        .filter_map(|p| match p {
            Piece::Function { name, text } => Some((*name, *text)),
            Piece::Code(_) => None,
        })
        .collect();
    let mut wanted: Vec<&str> = Vec::new();
    for piece in pieces {
        if let Piece::Code(code) = piece {
            wanted.extend(names(code).filter(|n| bodies.contains_key(n)));
        }
    }
    let mut reached: HashSet<&str> = HashSet::new();
    while let Some(name) = wanted.pop() {
        if reached.insert(name) {
            // The function's own name on its first line is no call.
            let body = bodies[name].split_once('\n').map_or("", |(_, b)| b);
            wanted.extend(names(body).filter(|n| bodies.contains_key(n)));
        }
    }
    pieces
        .iter()
        .filter_map(|p| match p {
            Piece::Code(code) => Some(*code),
            Piece::Function { name, text } => reached.contains(name).then_some(*text),
        })
        .collect()
}

/// The names (identifiers and keywords) in Lua code, leaving out strings
/// and comments.
pub(super) fn names(code: &str) -> impl Iterator<Item = &str> {
    let bytes = code.as_bytes();
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < bytes.len() {
            let c = bytes[i];
            if code[i..].starts_with("--") {
                i = match long_bracket(bytes, i + 2) {
                    Some(level) => close_long(code, i + 2, level),
                    None => code[i..].find('\n').map_or(bytes.len(), |n| i + n),
                };
            } else if c == b'"' || c == b'\'' {
                i += 1;
                while i < bytes.len() && bytes[i] != c {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            } else if let Some(level) = long_bracket(bytes, i) {
                i = close_long(code, i, level);
            } else if c.is_ascii_alphabetic() || c == b'_' {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                return Some(&code[start..i]);
            } else if c.is_ascii_digit() {
                // A number, with what may follow its digits (1e5, 0x1f).
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'.') {
                    i += 1;
                }
            } else {
                i += 1;
            }
        }
        None
    })
}

/// The level of a long bracket `[==[` opening at `i`, if one does.
fn long_bracket(bytes: &[u8], i: usize) -> Option<usize> {
    if bytes.get(i) != Some(&b'[') {
        return None;
    }
    let level = bytes[i + 1..].iter().take_while(|&&b| b == b'=').count();
    (bytes.get(i + 1 + level) == Some(&b'[')).then_some(level)
}

/// Where the long string or comment opened at `i` with `level` ends.
fn close_long(code: &str, i: usize, level: usize) -> usize {
    let close = format!("]{}]", "=".repeat(level));
    code[i..]
        .find(&close)
        .map_or(code.len(), |n| i + n + close.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_what_the_top_level_reaches_and_drops_the_rest() {
        let script = "\
local X = 1
-- helpers
local function a(x)
  return b(x) + 1
end
local function b(x)
  return x
end
local function c()
  return 'a() and b() in a string' -- and d() in a comment
end
local function d()
  return c()
end
return a(X)
";
        let kept = without_unused_functions(script);
        assert!(kept.contains("local function a(x)"));
        assert!(kept.contains("local function b(x)"));
        assert!(!kept.contains("local function c()"), "{kept}");
        assert!(!kept.contains("local function d()"), "{kept}");
        assert!(kept.starts_with("local X = 1\n-- helpers\n"));
        assert!(kept.ends_with("return a(X)\n"));
    }

    #[test]
    fn a_function_named_only_in_strings_or_comments_is_dropped() {
        let script = "\
local function f()
end
local s = \"f()\" .. 'f' .. [[f]] .. [==[f]]f]==] -- f
--[[ f()
]] return s
";
        assert!(!without_unused_functions(script).contains("local function f"));
    }

    #[test]
    fn a_layout_it_does_not_know_is_kept_whole() {
        for script in [
            "local function f()\n  return 1\n",
            "local function f()\nreturn 1\nend\nreturn 2\n",
        ] {
            assert_eq!(without_unused_functions(script), script);
        }
    }

    #[test]
    fn every_script_parses_and_keeps_every_function_it_names() {
        for script in crate::store::scripts::ALL.iter() {
            let body = script.body();
            let pieces =
                split(body).unwrap_or_else(|| panic!("{} has a layout not known", script.name()));
            let kept = join_reachable(&pieces);
            // A check that does not share the lexer: every word of the
            // kept text outside `--` comments that names a function
            // defined in the whole script is defined in the kept one.
            let defined = |text: &str| -> HashSet<String> {
                text.lines()
                    .filter_map(function_name)
                    .map(str::to_owned)
                    .collect()
            };
            let all = defined(body);
            let left = defined(&kept);
            for line in kept.lines() {
                let code = line.split("--").next().unwrap_or("");
                for word in code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                    assert!(
                        !all.contains(word) || left.contains(word),
                        "{}: {word} is named but was left out",
                        script.name()
                    );
                }
            }
        }
    }
}
