//! The names dq's scripts carry on the server: one Redis Functions library per build of the
//! scripts, `dq_<hash>`, and one function per script in it, `dq_<hash>_<script>`.
//!
//! `<hash>` is [`HASH_LEN`] hex digits of the SHA-1 of the library's text, so two dq versions
//! (a rolling upgrade) or two record-format levels on one server load two libraries side by
//! side and never replace each other's functions. A library left by an earlier dq build only
//! costs the server a little memory; `FUNCTION DELETE dq_<hash>` removes it (a process still
//! running that build loads it again on its next call).

use super::script_keys::SCRIPT_KEYS;

/// What every dq library name starts with.
pub const LIBRARY_PREFIX: &str = "dq_";

/// How many hex digits of the library text's SHA-1 its name carries.
pub const HASH_LEN: usize = 12;

/// The library named by `hash` (the first [`HASH_LEN`] hex digits of its text's SHA-1).
pub(crate) fn library_name(hash: &str) -> String {
    format!("{LIBRARY_PREFIX}{}", &hash[..HASH_LEN.min(hash.len())])
}

/// The function of `script` in `library`.
pub(crate) fn function_name(library: &str, script: &str) -> String {
    format!("{library}_{script}")
}

/// Whether `name` is the name of a dq library (`dq_` and [`HASH_LEN`] lowercase hex digits):
/// what an operator looking at `FUNCTION LIST` may delete once no process runs that build.
pub fn is_library(name: &str) -> bool {
    name.strip_prefix(LIBRARY_PREFIX).is_some_and(|hash| {
        hash.len() == HASH_LEN
            && hash
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// The script a dq function runs (`dq_<hash>_fetch` → `fetch`), or `None` for a name that is
/// not a dq function. For tools that read `FCALL`s in the slow log or `MONITOR`.
pub fn script_of_function(function: &str) -> Option<&'static str> {
    let split = LIBRARY_PREFIX.len() + HASH_LEN;
    let (library, rest) = (function.get(..split)?, function.get(split..)?);
    let script = rest.strip_prefix('_')?;
    if !is_library(library) {
        return None;
    }
    SCRIPT_KEYS
        .iter()
        .find(|(name, _)| *name == script)
        .map(|(name, _)| *name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn function_names_read_back_as_their_script() {
        let library = library_name("0123456789abcdef0123");
        assert_eq!(library, "dq_0123456789ab");
        assert!(is_library(&library));
        for (script, _) in SCRIPT_KEYS {
            let f = function_name(&library, script);
            assert_eq!(script_of_function(&f), Some(*script), "{f}");
        }
        for not_ours in [
            "dq_0123456789ab_nothing",
            "dq_0123456789ab",
            "dq_0123456789abfetch",
            "dq_0123456789AB_fetch",
            "dq_0123456789a_fetch",
            "xx_0123456789ab_fetch",
            "fetch",
            "",
        ] {
            assert_eq!(script_of_function(not_ours), None, "{not_ours}");
        }
        assert!(!is_library("dq_0123456789abc") && !is_library("dq_"));
    }
}
