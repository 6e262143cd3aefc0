//! A script as a Redis function library: loaded once by `FUNCTION LOAD`,
//! called by `FCALL`.
//!
//! `EVALSHA` runs a script's top level on every call, and every
//! `local function` there makes a closure each time, with an upvalue for
//! each local it uses: about a thousand Redis instructions per function,
//! a fifth of a semaphore pair's (the book's "Benchmark" chapter,
//! "Functions defined once"). A library's top level runs once, when it is
//! loaded; what runs on every call is the one function it registers. So
//! the library is the script rearranged:
//!
//! - its top-level functions are defined at the library's top level, in
//!   their order, once;
//! - a top-level `local` that one of them uses is declared there too, in
//!   its place among them, and assigned where the script declared it, on
//!   every call: no value outlives the call that gave it;
//! - everything else at the top level (statements, and the locals no
//!   function uses) is the registered function's body, in its order;
//! - `KEYS` and `ARGV` are the library's first locals, set from the
//!   function's arguments first thing on every call.
//!
//! Declarations keep the script's order, so every name means what it
//! meant in the script. What counts as a top-level item is what
//! [`super::unused`] knows (a function is `local function <name>(` at
//! column 0 up to a line that is exactly `end`), and a statement starts at
//! column 0 (its other lines are indented, or close it: `end`, `else`,
//! `elseif`, `until`, `}`, `)`). A script laid out otherwise, one that
//! declares a name twice at its top level, or one that would pass Lua's
//! limits (200 locals in the library, 60 upvalues in the function), or
//! that reads a local's name where it declares it (`local x = x`) is
//! the whole script inside the function: correct, only not cheaper. A unit
//! test keeps every script of the service out of that case.

use std::collections::HashSet;

use super::unused::{Piece, names, split};

/// The name every library and function of the service starts with.
pub const PREFIX: &str = "latchkey_";

/// Lua 5.1's limits: locals per function (`LUAI_MAXVARS`) and upvalues
/// per function (`LUAI_MAXUPVALUES`). The upvalues are counted from above
/// (every name the function's body shows that the library declares).
const MAX_LOCALS: usize = 200;
const MAX_UPVALUES: usize = 60;

/// A library: its name (also its one function's name) and its code.
pub struct Library {
    pub name: String,
    pub code: String,
    /// Whether the script's top level was rearranged (false: the whole
    /// script is the function's body).
    pub hoisted: bool,
}

/// The library of `source` (a script as `EVALSHA` would run it). `flags`
/// are the function's flags (Redis's `no-writes`, ...). Its name is
/// [`PREFIX`] and the SHA-1 of its code, so a library's name changes
/// exactly when what it does does: instances of two versions each call
/// their own during a rollout.
pub fn library(source: &str, flags: &[&str]) -> Library {
    let flags = flags
        .iter()
        .map(|f| format!("'{f}'"))
        .collect::<Vec<_>>()
        .join(", ");
    let (body, hoisted) = match rearranged(source) {
        Ok((top, entry)) => (
            format!(
                "local KEYS, ARGV\n{top}\nlocal function run(keys, args)\nKEYS, ARGV = keys, args\n{entry}\nend\n"
            ),
            true,
        ),
        Err(_) => (
            format!("local function run(KEYS, ARGV)\n{source}\nend\n"),
            false,
        ),
    };
    // The name is made of the code without it (it cannot hash itself).
    let hash = redis::Script::new(&format!("{body}{flags}"))
        .get_hash()
        .to_owned();
    let name = format!("{PREFIX}{hash}");
    let code = format!(
        "#!lua name={name}\n{body}redis.register_function{{function_name = '{name}', callback = run, flags = {{{flags}}}}}\n"
    );
    Library {
        name,
        code,
        hoisted,
    }
}

/// A top-level statement: a `local` declaration (its names, and what
/// follows the `=`, if anything), or anything else.
enum Item<'a> {
    Local {
        names: &'a str,
        value: Option<&'a str>,
        text: &'a str,
    },
    Other(&'a str),
}

/// The library's top level and its function's body, or why the script
/// cannot be rearranged (see the top of this module).
fn rearranged(source: &str) -> Result<(String, String), String> {
    let pieces = split(source).ok_or("a layout not known")?;
    let mut used_by_functions: HashSet<&str> = HashSet::new();
    let mut declared: HashSet<&str> = HashSet::from(["KEYS", "ARGV", "run", "keys", "args"]);
    for piece in &pieces {
        if let Piece::Function { name, text } = piece {
            if !declared.insert(name) {
                return Err(format!("{name} is declared twice"));
            }
            used_by_functions.extend(names(text));
        }
    }
    let (mut top, mut entry) = (String::new(), String::new());
    for piece in &pieces {
        match piece {
            Piece::Function { text, .. } => top.push_str(text),
            Piece::Code(code) => {
                for item in items(code).ok_or("a local not known")? {
                    match item {
                        Item::Local { names, value, .. }
                            if local_names(names).any(|n| used_by_functions.contains(n)) =>
                        {
                            for name in local_names(names) {
                                if !declared.insert(name) {
                                    return Err(format!("{name} is declared twice"));
                                }
                                // `local x = x` reads a global x; assigned
                                // in the function, it would read itself.
                                if value.is_some_and(|v| super::unused::names(v).any(|n| n == name))
                                {
                                    return Err(format!("{name} is read where it is declared"));
                                }
                            }
                            top.push_str(&format!("local {names}\n"));
                            match value {
                                Some(value) => entry.push_str(&format!("{names} ={value}")),
                                None => {
                                    let nils = vec!["nil"; local_names(names).count()].join(", ");
                                    entry.push_str(&format!("{names} = {nils}\n"));
                                }
                            }
                        }
                        Item::Local { text, .. } | Item::Other(text) => entry.push_str(text),
                    }
                }
            }
        }
    }
    let mut upvalues: HashSet<&str> = names(&entry).filter(|n| declared.contains(n)).collect();
    upvalues.extend(["KEYS", "ARGV"]);
    if declared.len() > MAX_LOCALS || upvalues.len() > MAX_UPVALUES {
        return Err(format!(
            "{} locals and {} upvalues",
            declared.len(),
            upvalues.len()
        ));
    }
    Ok((top, entry))
}

/// The names of a `local` declaration's name list (`a, b`).
fn local_names(names: &str) -> impl Iterator<Item = &str> {
    names.split(',').map(str::trim)
}

/// The top-level statements of a stretch of top-level code, each with its
/// lines (comments and blank lines before the first one are one more
/// `Other`); None when a `local` line is not `local <names>` or
/// `local <names> = ...`.
fn items(code: &str) -> Option<Vec<Item<'_>>> {
    let mut starts = Vec::new();
    let mut at = 0;
    for line in code.split_inclusive('\n') {
        if starts_statement(line) {
            starts.push(at);
        }
        at += line.len();
    }
    let mut items = Vec::new();
    if starts.first().is_none_or(|&s| s > 0) {
        items.push(Item::Other(
            &code[..starts.first().copied().unwrap_or(code.len())],
        ));
    }
    for (i, &start) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(code.len());
        let text = &code[start..end];
        items.push(match text.strip_prefix("local ") {
            Some(rest) => local_item(rest, text)?,
            None => Item::Other(text),
        });
    }
    Some(items)
}

/// Whether `line` starts a top-level statement: it starts at column 0,
/// and is not a comment or the closing part of one.
fn starts_statement(line: &str) -> bool {
    let starts_at_zero = line.starts_with(|c: char| !c.is_whitespace());
    let closing = ["end", "else", "elseif", "until"].iter().any(|word| {
        line.strip_prefix(word)
            .is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_'))
    }) || line.starts_with(['}', ')']);
    starts_at_zero && !line.starts_with("--") && !closing
}

/// A `local` statement: `rest` is what follows `local `.
fn local_item<'a>(rest: &'a str, text: &'a str) -> Option<Item<'a>> {
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ',' || c == ' '))
        .unwrap_or(rest.len());
    let names = rest[..end].trim_end();
    let valid = !names.is_empty()
        && local_names(names).all(|n| {
            n.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
    if !valid {
        return None;
    }
    let after = &rest[end..];
    if let Some(value) = after.strip_prefix('=')
        && !value.starts_with('=')
    {
        return Some(Item::Local {
            names,
            value: Some(value),
            text,
        });
    }
    // No value: what follows the names may be only comments (the rest of
    // the line, and the comment lines before the next statement).
    let comments_only = after.lines().all(|line| {
        let line = line.trim();
        line.is_empty() || line.starts_with("--")
    });
    comments_only.then_some(Item::Local {
        names,
        value: None,
        text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn functions_and_the_locals_they_use_are_defined_once() {
        let script = "\
local PUBLISH = 'PUBLISH'
local clock = redis.call('TIME')
local now = tonumber(clock[1])
local unused_by_functions = 3 -- stays in the function
local pending
-- a helper
local function later(ms)
  return now + ms + #KEYS
end
local function head()
  return pending
end
if ARGV[1] == 'x' then
  return later(1)
end
local t = {
  1,
}
return {later(unused_by_functions), head(), t[1]}
";
        let lib = library(script, &["no-writes"]);
        assert!(lib.hoisted);
        assert!(lib.name.starts_with(PREFIX) && lib.name.len() == PREFIX.len() + 40);
        let (top, entry) = rearranged(script).unwrap();
        assert_eq!(
            top,
            "local now\nlocal pending\nlocal function later(ms)\n  return now + ms + #KEYS\nend\nlocal function head()\n  return pending\nend\n"
        );
        assert_eq!(
            entry,
            "local PUBLISH = 'PUBLISH'\nlocal clock = redis.call('TIME')\nnow = tonumber(clock[1])\nlocal unused_by_functions = 3 -- stays in the function\npending = nil\nif ARGV[1] == 'x' then\n  return later(1)\nend\nlocal t = {\n  1,\n}\nreturn {later(unused_by_functions), head(), t[1]}\n"
        );
        assert!(lib.code.starts_with(&format!("#!lua name={}\n", lib.name)));
        assert!(lib.code.ends_with(&format!(
            "redis.register_function{{function_name = '{}', callback = run, flags = {{'no-writes'}}}}\n",
            lib.name
        )));
    }

    #[test]
    fn a_name_declared_twice_or_an_unknown_layout_keeps_the_script_whole() {
        let twice = "local x = 1\nlocal function f()\n  return x\nend\nlocal x = 2\nreturn f()\n";
        let odd = "local function f()\nreturn 1\nend\nreturn f()\n";
        let attrib = "local x <const> = 1\nlocal function f()\n  return x\nend\nreturn f()\n";
        let itself =
            "local unpack = unpack\nlocal function f(t)\n  return unpack(t)\nend\nreturn f({1})\n";
        for script in [twice, odd, attrib, itself] {
            let lib = library(script, &[]);
            assert!(!lib.hoisted, "{script}");
            assert!(rearranged(script).is_err());
            assert!(
                lib.code
                    .contains(&format!("local function run(KEYS, ARGV)\n{script}\nend\n"))
            );
        }
    }

    #[test]
    fn the_name_follows_the_code() {
        let a = library("return 1\n", &[]);
        let b = library("return 2\n", &[]);
        assert_ne!(a.name, b.name);
        assert_eq!(a.name, library("return 1\n", &[]).name);
        assert_ne!(a.name, library("return 1\n", &["no-writes"]).name);
    }

    #[test]
    fn every_script_of_the_service_is_defined_once_and_named_apart() {
        use crate::store::scripts::{ALL, Publish, only_reads};
        let mut names = HashSet::new();
        for script in ALL.iter() {
            for publish in [Publish::Classic, Publish::Sharded] {
                let lib = script.library(publish);
                let why = rearranged(script.source(publish)).err();
                assert!(lib.hoisted, "{} is kept whole: {why:?}", script.name());
                assert!(names.insert(lib.name.clone()), "{}", script.name());
                let reads = only_reads(script.source(publish));
                assert_eq!(
                    lib.code.contains("flags = {'no-writes'}"),
                    reads,
                    "{}",
                    script.name()
                );
                assert!(
                    reads || lib.code.contains("flags = {}"),
                    "{}",
                    script.name()
                );
            }
        }
        // What only reads, among the scripts that show an object's state.
        let reading: Vec<&str> = ALL
            .iter()
            .filter(|s| only_reads(s.source(Publish::Classic)))
            .map(|s| s.name())
            .collect();
        assert_eq!(
            reading,
            [
                "lock_state",
                "redlock_state",
                "latch_state",
                "session_state",
                "rl_state",
                "rl_key_state"
            ]
        );
    }

    #[test]
    fn a_script_reads_only_when_every_command_it_calls_reads() {
        use crate::store::scripts::only_reads;
        assert!(only_reads(
            "local t = redis.call('TIME')\nreturn redis.call('HMGET', KEYS[1], 'a')"
        ));
        assert!(!only_reads(
            "redis.call('GET', KEYS[1])\nredis.call('DEL', KEYS[1])"
        ));
        assert!(!only_reads("redis.call(PUBLISH, ARGV[1], 'x')"));
        assert!(!only_reads(
            "local c = 'GET'\nreturn redis.call(c, KEYS[1])"
        ));
        assert!(only_reads("return 1"));
    }
}
