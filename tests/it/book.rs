//! Issue 50: the manual in `docs/` — its commands page is what the binary generates from the
//! command line's definition, and no link between its pages (or from the README into it) leads
//! nowhere. (`scripts/test.sh` builds it with `mdbook build docs`; mdBook's HTML renderer does
//! not fail on a broken link by itself, so this check is what does.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::support::{mesh, repo, run};

/// The command that writes the commands page again, named when it differs.
const REGENERATE: &str = "cargo run -q -- man --markdown > docs/src/commands.md";

/// The committed commands page is byte for byte what `mesh man --markdown` prints, whatever the
/// environment's values of the options' variables: a changed `--help` that is not written into
/// the manual fails here.
#[test]
fn the_commands_page_is_what_the_binary_generates() {
    let state = tempfile::tempdir().unwrap();
    let mut c = mesh(state.path());
    // Values that would show in `--help` as `[env: MESH_NETNS=…]` were they not hidden.
    c.env("MESH_STATE_DIR", "/proc/no-state-here")
        .env("MESH_NETNS", "netns-of-the-environment")
        .env("MESH_CONTAINER_JOBS", "7")
        .args(["man", "--markdown"]);
    let generated = run(c);
    assert_eq!(generated.code, 0, "{}", generated.stderr);
    assert!(
        !generated.stdout.contains("netns-of-the-environment")
            && !generated.stdout.contains("/proc/no-state-here"),
        "the page shows the environment's values"
    );
    for command in [
        "## mesh fleet build",
        "## mesh take",
        "## mesh man",
        "--markdown",
    ] {
        assert!(
            generated.stdout.contains(command),
            "the generated page lacks {command}"
        );
    }
    let committed = std::fs::read_to_string(repo().join("docs/src/commands.md")).unwrap();
    if committed != generated.stdout {
        let first = committed
            .lines()
            .zip(generated.stdout.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(
                committed
                    .lines()
                    .count()
                    .min(generated.stdout.lines().count()),
            );
        panic!(
            "docs/src/commands.md is not what the binary generates (first difference at line {}); \
             write it again with `{REGENERATE}`",
            first + 1
        );
    }
}

/// Every relative link of the book's pages and of the README resolves: to a file that exists,
/// and to a heading of it when it names an anchor. Every page is in `SUMMARY.md`, and every
/// page `SUMMARY.md` names exists.
#[test]
fn every_link_in_the_book_resolves() {
    let src = repo().join("docs/src");
    let mut pages = BTreeMap::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            pages.insert(name, std::fs::read_to_string(&path).unwrap());
        }
    }
    let broken = broken_links(&pages);
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));

    let summary: BTreeSet<String> = links(&pages["SUMMARY.md"])
        .into_iter()
        .map(|l| l.split('#').next().unwrap().to_owned())
        .collect();
    let orphans: Vec<&String> = pages
        .keys()
        .filter(|p| *p != "SUMMARY.md" && !summary.contains(*p))
        .collect();
    assert!(orphans.is_empty(), "pages not in SUMMARY.md: {orphans:?}");

    // The README's links into the manual, from the repository's root.
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let into_docs: Vec<String> = links(&readme)
        .into_iter()
        .filter(|l| !l.contains("://"))
        .collect();
    assert!(
        into_docs.iter().any(|l| l.starts_with("docs/src/")),
        "the README does not link to the manual"
    );
    for link in into_docs {
        let file = link.split('#').next().unwrap();
        assert!(
            repo().join(file).exists(),
            "README.md links to {link}, which does not exist"
        );
    }
}

/// The check itself finds what it is for: a missing page, a missing anchor, a link in code is
/// not a link, and an anchor made as mdBook makes it resolves.
#[test]
fn the_link_check_finds_a_broken_link() {
    let pages: BTreeMap<String, String> = [
        (
            "a.md".to_owned(),
            "# A\n\n## What a thing is, and what not\n\n[ok](b.md) [ok](#a) \
             [ok](b.md#the-b-page) [gone](c.md) [no anchor](b.md#nope)\n\n`[code](x.md)`\n\n\
             ```\n[fenced](y.md)\n```\n[ok](#what-a-thing-is-and-what-not) [web](https://example.org)\n"
                .to_owned(),
        ),
        ("b.md".to_owned(), "# The `b` page\n".to_owned()),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        broken_links(&pages),
        vec![
            "a.md: c.md (no such page)".to_owned(),
            "a.md: b.md#nope (no such heading)".to_owned(),
        ]
    );
}

/// Each relative link of `pages` (by file name) that leads nowhere, as `PAGE: LINK (why)`.
fn broken_links(pages: &BTreeMap<String, String>) -> Vec<String> {
    let mut broken = Vec::new();
    for (name, text) in pages {
        for link in links(text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = match link.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (link.as_str(), None),
            };
            let target = if file.is_empty() { name.as_str() } else { file };
            let Some(page) = pages.get(target) else {
                let why = if Path::new(target).extension().is_some_and(|e| e == "md") {
                    "no such page"
                } else {
                    "not a page of the book"
                };
                broken.push(format!("{name}: {link} ({why})"));
                continue;
            };
            if let Some(anchor) = anchor {
                if !anchors(page).contains(anchor) {
                    broken.push(format!("{name}: {link} (no such heading)"));
                }
            }
        }
    }
    broken
}

/// The targets of the Markdown links `[text](target)` in `text`, outside code.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let prose = outside_code_spans(line);
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            if let Some(end) = rest.find(')') {
                out.push(rest[..end].to_owned());
                rest = &rest[end..];
            }
        }
    }
    out
}

/// `line` without its inline code spans (`…`).
fn outside_code_spans(line: &str) -> String {
    line.split('`').step_by(2).collect::<Vec<_>>().join(" ")
}

/// The ids mdBook gives the headings of `page`: the heading's text (inline code as its text),
/// lower-cased, whitespace as `-`, every character but letters, digits, `-` and `_` dropped; a
/// repeated id gets `-1`, `-2`, ….
fn anchors(page: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let heading = line.trim_start_matches('#').trim();
        let id: String = heading
            .chars()
            .filter_map(|c| {
                if c.is_alphanumeric() || c == '_' || c == '-' {
                    Some(c.to_lowercase().next().unwrap_or(c))
                } else if c.is_whitespace() {
                    Some('-')
                } else {
                    None
                }
            })
            .collect();
        let n = seen.entry(id.clone()).or_insert(0);
        out.insert(if *n == 0 {
            id.clone()
        } else {
            format!("{id}-{n}")
        });
        *n += 1;
    }
    out
}
