//! Nickel text as `nickel format` writes it: the modules the mesh writes (`mesh import`) are
//! laid out by the same formatter an operator runs on the ones they write, so that a later
//! `nickel format` changes nothing and a diff shows only what changed.

/// Nickel text that does not parse, as the formatter said it.
#[derive(Debug, thiserror::Error)]
#[error("not Nickel the formatter can read: {0}")]
pub struct FormatError(String);

/// Nickel's grammar and `nickel format`'s queries, as nickel-lang-core's `format` builds them
/// for each file: built once here (about 9 ms), not once per module an import writes.
fn nickel() -> Result<&'static topiary_core::Language, FormatError> {
    static NICKEL: std::sync::OnceLock<Result<topiary_core::Language, String>> =
        std::sync::OnceLock::new();
    NICKEL
        .get_or_init(|| {
            let grammar = tree_sitter_nickel::LANGUAGE.into();
            let query = topiary_core::TopiaryQuery::new(&grammar, topiary_queries::nickel())
                .map_err(|e| e.to_string())?;
            Ok(topiary_core::Language {
                name: "nickel".to_owned(),
                query,
                grammar,
                indent: None,
            })
        })
        .as_ref()
        .map_err(|e| FormatError(e.clone()))
}

/// `text` formatted as `nickel format` formats it.
pub fn format(text: &str) -> Result<String, FormatError> {
    let mut out = Vec::with_capacity(text.len());
    topiary_core::formatter_str(
        text,
        &mut out,
        nickel()?,
        topiary_core::Operation::Format {
            // Formatting twice to check the formatter is its own tests' work (below).
            skip_idempotence: true,
            tolerate_parsing_errors: false,
        },
    )
    .map_err(|e| FormatError(e.to_string()))?;
    String::from_utf8(out).map_err(|e| FormatError(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_as_nickel_format_and_changes_nothing_formatted() {
        let text = "{ a = 1,   b =\"x\",\n  c = { d = [1,2] } }\n";
        let once = format(text).unwrap();
        assert_ne!(once, text, "the layout is the formatter's, not as given");
        assert_eq!(
            format(&once).unwrap(),
            once,
            "formatted text is kept as it is"
        );
        // The same values: the formatter moves only blanks.
        let squeeze = |s: &str| s.split_whitespace().collect::<String>();
        assert_eq!(
            squeeze(&once).replace(',', ""),
            squeeze(text).replace(',', "")
        );
    }

    #[test]
    fn the_same_text_as_nickel_format() {
        // nickel-lang-core's own `format` (what `nickel format` runs), on a module as an import
        // writes one before it is formatted.
        let text = "# Imported.\n{\n  name = \"shop\",\n  config = fun s => {\n    containers = {\n      web = { image = \"nginx@sha256:00\", command = [\"a\", \"b\"],\n        environment = { A = \"1\", \"B-C\" = s.credentials.b },\n        # a choice\n        ports = [{ host = s.ports.web, container = 80 }],\n      },\n    },\n  },\n}\n";
        let mut theirs = Vec::new();
        nickel_lang_core::format::format(text.as_bytes(), &mut theirs).unwrap();
        assert_eq!(format(text).unwrap(), String::from_utf8(theirs).unwrap());
    }

    #[test]
    fn a_comment_is_kept() {
        let once = format("{\n  # why\n  a = 1,\n}\n").unwrap();
        assert!(once.contains("# why"), "{once}");
    }

    #[test]
    fn text_that_does_not_parse_is_an_error() {
        assert!(format("{ a = ").is_err());
    }
}
