//! The payload argument of `enqueue`: JSON text, `@path` to read a file, or `-` for stdin.

use std::io::Read;

use serde_json::Value;

use crate::fail::{Failure, Result, quoted};

/// The payload `arg` gives or names, parsed.
pub(crate) fn read(arg: &str) -> Result<Value> {
    read_as(arg, "--payload")
}

/// JSON that the option `option` gives or names (`-` for stdin, `@path` for a file), parsed.
pub(crate) fn read_as(arg: &str, option: &str) -> Result<Value> {
    if arg == "-" {
        let mut bytes = Vec::new();
        std::io::stdin()
            .read_to_end(&mut bytes)
            .map_err(|e| Failure::error(format!("reading the payload from stdin: {e}")))?;
        return decode(&bytes, "stdin");
    }
    if let Some(path) = arg.strip_prefix('@') {
        let bytes = std::fs::read(path)
            .map_err(|e| Failure::invalid(format!("cannot read the payload file `{}`: {e}", quoted(path))))?;
        return decode(&bytes, &format!("the payload file `{}`", quoted(path)));
    }
    decode(arg.as_bytes(), option)
}

/// Payload bytes from `from` (named in errors) as JSON: they must be UTF-8 text, then valid JSON.
pub(crate) fn decode(bytes: &[u8], from: &str) -> Result<Value> {
    // Checked here rather than left to the reader, whose error (an I/O error, exit 1) would not say it is
    // the input that is wrong.
    let text = std::str::from_utf8(bytes).map_err(|e| {
        Failure::invalid(format!("{from} is not UTF-8: the byte at offset {} is not valid UTF-8", e.valid_up_to()))
            .hint("a payload is JSON text in UTF-8; convert it first (e.g. with iconv)")
    })?;
    serde_json::from_str(text).map_err(|e| {
        Failure::invalid(format!("{from} is not valid JSON: {e}"))
            .hint("quote the payload for your shell, e.g. --payload '{\"path\": \"a.txt\"}'")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fail::code;

    #[test]
    fn payloads_must_be_utf8_json_and_say_where_they_came_from() {
        assert_eq!(decode(br#"{"a": 1}"#, "--payload").expect("json")["a"], 1);
        let not_utf8 = decode(b"{\"a\": \"\xff\"}", "stdin").expect_err("not utf-8");
        assert_eq!(not_utf8.code, code::INVALID);
        assert_eq!(not_utf8.message, "stdin is not UTF-8: the byte at offset 7 is not valid UTF-8");
        let not_json = decode(b"{", "--payload").expect_err("not json");
        assert_eq!(not_json.code, code::INVALID);
        assert!(not_json.message.starts_with("--payload is not valid JSON: "), "{}", not_json.message);
    }

    #[test]
    fn payload_files_that_are_not_utf8_are_bad_input() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("latin1.json");
        std::fs::write(&path, b"{\"name\": \"caf\xe9\"}").expect("write");
        let f = read(&format!("@{}", path.display())).expect_err("not utf-8");
        assert_eq!(f.code, code::INVALID);
        assert!(f.message.contains(&format!("`{}` is not UTF-8", path.display())), "{}", f.message);
        let missing = read(&format!("@{}", dir.path().join("none.json").display())).expect_err("missing");
        assert_eq!(missing.code, code::INVALID);
    }
}
