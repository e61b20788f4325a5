//! The core's top-level modules form no cycle (issue 21): each can be read, and tested, from the bottom up.
//! A module's edges are the `crate::<module>` paths its files name outside comments and test modules (a
//! folder module counts as one); a cycle fails with the references that close it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The text a module's dependencies are read from: comments and string literals blanked, and inline
/// `#[cfg(test)] mod tests { ... }` blocks cut away (an out-of-line `mod tests;` is a file of its own, skipped
/// by name in [`graph`]).
fn code_of(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let end = text[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
                i = end;
                out.push(' ');
            }
            b'"' => {
                // A string (raw strings without `"` inside are read the same way): its text is not code.
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                out.push_str("\"\"");
            }
            b'\'' if b.get(i + 2) == Some(&b'\'') || b.get(i + 1) == Some(&b'\\') => {
                // A char literal ('"', '\'', '\\'); lifetimes (`'a`) fall through.
                let end = text[i + 1..].find('\'').map_or(b.len(), |e| i + 1 + e + 1);
                let end = if b.get(i + 1) == Some(&b'\\') {
                    text[i + 3..].find('\'').map_or(b.len(), |e| i + 3 + e + 1)
                } else {
                    end
                };
                i = end;
                out.push_str("' '");
            }
            _ => {
                let c = text[i..].chars().next().expect("in bounds");
                out.push(c);
                i += c.len_utf8();
            }
        }
    }
    while let Some(at) = out.find("#[cfg(test)]") {
        let rest = &out[at..];
        let Some(brace) = rest.find(['{', ';']) else {
            break;
        };
        let end = if rest.as_bytes()[brace] == b';' {
            at + brace + 1
        } else {
            let mut depth = 0;
            let mut end = out.len();
            for (k, c) in rest[brace..].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = at + brace + k + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            end
        };
        out.replace_range(at..end, "");
    }
    out
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The top-level modules `code` names: `crate::m::...` and the first names of a `crate::{m, n::x}` group;
/// `roots` are the other spellings of the crate root in this file (`super::` in a top-level file,
/// `super::super::` one folder down).
fn references(code: &str, roots: &[&str]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let starts = ["crate::"].iter().chain(roots).flat_map(|root| {
        code.match_indices(root)
            .filter(|(at, _)| {
                // `crate::` / `super::` as a path's start, not the tail of `super::super::` or an identifier.
                !code[..*at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':')
            })
            .map(|(at, r)| at + r.len())
    });
    for start in starts.collect::<Vec<_>>() {
        let rest = &code[start..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if c.is_whitespace() => {}
                    _ if start => {
                        out.insert(ident_at(&group[i..]).to_string());
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            out.insert(ident_at(rest).to_string());
        }
    }
    out.retain(|m| m != "super" && m != "self");
    out
}

/// The crate root's re-exports (`pub use m::{A, B}` in lib.rs): `crate::A` is module `m`.
fn root_reexports(src: &Path) -> BTreeMap<String, String> {
    let lib = code_of(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    let mut out = BTreeMap::new();
    for stmt in lib.split(';') {
        let Some(path) = stmt.trim().strip_prefix("pub use ") else {
            continue;
        };
        let module = ident_at(path).to_string();
        let names = match (path.find('{'), path.rfind('}')) {
            (Some(a), Some(b)) => path[a + 1..b].split(',').map(str::trim).collect::<Vec<_>>(),
            _ => vec![path.rsplit("::").next().unwrap_or("").trim()],
        };
        for n in names.into_iter().filter(|n| !n.is_empty()) {
            out.insert(n.to_string(), module.clone());
        }
    }
    out
}

fn graph(src: &Path) -> Graph {
    let mut files: BTreeMap<String, Vec<std::path::PathBuf>> = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(src).unwrap();
                let top = rel.iter().next().unwrap().to_string_lossy();
                let top = top.trim_end_matches(".rs").to_string();
                if top != "lib" {
                    files.entry(top).or_default().push(path);
                }
            }
        }
    }
    let reexports = root_reexports(src);
    let mut g = Graph::new();
    for (m, paths) in &files {
        let deps = g.entry(m.clone()).or_default();
        for p in paths {
            // A file's `super::` is the crate root at the top level, its folder's module one level down.
            let depth = p.strip_prefix(src).unwrap().components().count();
            let in_mod_rs = p.file_name().is_some_and(|f| f == "mod.rs");
            let roots: &[&str] = match (depth, in_mod_rs) {
                (1, _) | (2, true) => &["super::"],
                (2, false) | (3, true) => &["super::super::"],
                _ => &[],
            };
            let code = code_of(&std::fs::read_to_string(p).unwrap());
            deps.extend(
                references(&code, roots)
                    .into_iter()
                    .map(|d| reexports.get(&d).cloned().unwrap_or(d))
                    .filter(|d| d != m && files.contains_key(d)),
            );
        }
    }
    g
}

/// Strongly connected components of more than one module (Tarjan).
fn cycles(g: &Graph) -> Vec<Vec<String>> {
    struct State<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(st: &mut State<'a>, v: &'a str) {
        let n = st.index.len();
        st.index.insert(v, n);
        st.low.insert(v, n);
        st.stack.push(v);
        let g = st.g;
        for w in g.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !st.index.contains_key(w) {
                visit(st, w);
                let lw = st.low[w];
                let lv = st.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if st.stack.contains(&w) {
                let iw = st.index[w];
                let lv = st.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if st.low[v] == st.index[v] {
            let mut component = Vec::new();
            while let Some(w) = st.stack.pop() {
                component.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                st.found.push(component);
            }
        }
    }
    let mut st = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in g.keys() {
        if !st.index.contains_key(v.as_str()) {
            visit(&mut st, v);
        }
    }
    st.found
}

#[test]
fn the_checker_reads_paths_and_groups_and_sees_a_cycle() {
    let refs = references(
        "use crate::a::X;\nuse crate::{b, c::{D, e::F}, g::H};\nlet x = crate::i::f();",
        &[],
    );
    let want: BTreeSet<String> = ["a", "b", "c", "g", "i"].map(String::from).into();
    assert_eq!(refs, want);
    let code = code_of(
        "// crate::z::W\nfn f() { let u = \"s3://x\"; let c = '\"'; crate::j::g(); /* crate::y */ }\n\
         #[cfg(test)]\nmod tests {\n    use crate::t::T;\n    fn h() { {} }\n}\nfn k() { crate::k2::f() }\n\
         #[cfg(test)]\nmod more;\nfn l() { super::m::f(); super::super::n::f() }",
    );
    let got = references(&code, &["super::"]);
    let want: BTreeSet<String> = ["j", "k2", "m"].map(String::from).into();
    assert_eq!(got, want);
    let got = references(&code, &["super::super::"]);
    let want: BTreeSet<String> = ["j", "k2", "n"].map(String::from).into();
    assert_eq!(got, want);
    let mut g = Graph::new();
    for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")] {
        g.entry(a.into()).or_default().insert(b.into());
        g.entry(b.into()).or_default();
    }
    assert_eq!(cycles(&g), vec![vec!["a", "b", "c"]]);
}

#[test]
fn the_core_modules_form_no_cycle() {
    let g = graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(g["scan"].contains("summary") && g["report"].contains("summary"));
    let found = cycles(&g);
    let explain: Vec<String> = found
        .iter()
        .flat_map(|c| {
            c.iter().map(|m| {
                let inside: Vec<&String> = g[m].iter().filter(|d| c.contains(d)).collect();
                format!("{m} -> {inside:?}")
            })
        })
        .collect();
    assert!(
        found.is_empty(),
        "module cycles: {found:?}\n{}",
        explain.join("\n")
    );
}
