//! No import circle between the crate's modules (issue 40). The crate's
//! source is read as text: each module (a file, or an inline `mod x { }`)
//! depends on every module a path in it names (`crate::`, `$crate::`,
//! `super::`, `self::`, or a child module's name, in `use` trees and in
//! code), test modules left out. A module's own children and parent are
//! modules like any other: `fs/acl.rs` naming `super::FsStore` depends on
//! `fs`, and `fs` calling `acl::...` depends on `fs::acl`. Any strongly
//! connected set of more than one module fails the test, with the paths
//! that close it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's path, `["crate", "fs", "acl"]`.
type ModPath = Vec<String>;

/// Source text with comments removed and string and char literals emptied,
/// so that only code's braces and paths are left.
fn clean(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i + 1 < b.len() && !(b[i] == '*' && b[i + 1] == '/') {
                if b[i] == '\n' {
                    out.push('\n');
                }
                i += 1;
            }
            i += 2;
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !prev_is_ident(&b, i) {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while j < b.len() && b[j] == '#' {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                if b[j] == '\n' {
                    out.push('\n');
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                if b.get(i) == Some(&'\n') {
                    out.push('\n');
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if next == Some('\\') {
                let mut j = i + 2;
                while j < b.len() && b[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
                out.push_str("' '");
            } else if b.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn prev_is_ident(b: &[char], i: usize) -> bool {
    i > 0 && (b[i - 1].is_alphanumeric() || b[i - 1] == '_')
}

#[derive(Clone, Debug, PartialEq)]
struct Tok {
    text: String,
    line: usize,
}

fn tokens(code: &str) -> Vec<Tok> {
    let b: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_alphanumeric() || c == '_' || c == '$' {
            let start = i;
            i += 1;
            while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_') {
                i += 1;
            }
            out.push(Tok {
                text: b[start..i].iter().collect(),
                line,
            });
        } else if c == ':' && b.get(i + 1) == Some(&':') {
            out.push(Tok {
                text: "::".into(),
                line,
            });
            i += 2;
        } else {
            out.push(Tok {
                text: c.to_string(),
                line,
            });
            i += 1;
        }
    }
    out
}

fn is_ident(t: &str) -> bool {
    t.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_' || c == '$')
}

/// One path named in a module: where, and what it resolves to.
struct Reference {
    from: ModPath,
    to: ModPath,
    file: PathBuf,
    line: usize,
}

struct Parser<'a> {
    toks: &'a [Tok],
    file: &'a Path,
    /// Modules found (files and inline), with their declared children.
    children: &'a mut BTreeMap<ModPath, BTreeSet<String>>,
    refs: &'a mut Vec<Reference>,
}

impl Parser<'_> {
    /// Resolves `segs` as written in `module`; `None` for a path that
    /// starts outside the crate (std, s3s, a local variable's field...).
    fn resolve(&self, module: &ModPath, segs: &[String], in_use: bool) -> Option<ModPath> {
        let first = segs.first()?;
        let mut path = match first.as_str() {
            "crate" | "$crate" => vec!["crate".to_string()],
            "super" | "self" => module.clone(),
            name if self.children.get(module).is_some_and(|c| c.contains(name)) => module.clone(),
            _ => return None,
        };
        let _ = in_use;
        for s in segs
            .iter()
            .skip(usize::from(first == "crate" || first == "$crate"))
        {
            match s.as_str() {
                "super" => {
                    path.pop();
                }
                "self" => {}
                other => path.push(other.to_string()),
            }
        }
        Some(path)
    }

    fn note(&mut self, module: &ModPath, segs: &[String], line: usize, in_use: bool) {
        if let Some(to) = self.resolve(module, segs, in_use) {
            self.refs.push(Reference {
                from: module.clone(),
                to,
                file: self.file.to_path_buf(),
                line,
            });
        }
    }

    /// Parses a `use` tree at `i` with the path `prefix` before it; returns
    /// the index after it.
    fn use_tree(&mut self, module: &ModPath, mut i: usize, prefix: Vec<String>) -> usize {
        let mut segs = prefix;
        loop {
            let Some(t) = self.toks.get(i) else { return i };
            match t.text.as_str() {
                "{" => {
                    i += 1;
                    loop {
                        match self.toks.get(i).map(|t| t.text.as_str()) {
                            None => return i,
                            Some("}") => return i + 1,
                            Some(",") => i += 1,
                            _ => i = self.use_tree(module, i, segs.clone()),
                        }
                    }
                }
                "*" => {
                    self.note(module, &segs, t.line, true);
                    return i + 1;
                }
                "::" => i += 1,
                text if is_ident(text) && text != "as" => {
                    segs.push(text.to_string());
                    i += 1;
                }
                _ => {
                    // `as name`, `,`, `}` or `;`: the path ends here.
                    self.note(module, &segs, t.line, true);
                    if t.text == "as" {
                        i += 2;
                    }
                    return i;
                }
            }
        }
    }

    /// Walks the items of `module` from `i` until its closing brace (or the
    /// end of the file); returns the index after it.
    fn module(&mut self, module: &ModPath, mut i: usize) -> usize {
        self.children.entry(module.clone()).or_default();
        let mut depth = 0usize;
        let mut cfg_test = false;
        while let Some(t) = self.toks.get(i) {
            let text = t.text.as_str();
            let at = |k: usize| self.toks.get(i + k).map_or("", |t| t.text.as_str());
            match text {
                "#" if at(1) == "[" && at(2) == "cfg" && at(3) == "(" && at(4) == "test" && at(5) == ")" => {
                    cfg_test = true;
                    i += 7;
                    continue;
                }
                "mod" if is_ident(at(1)) && (at(2) == "{" || at(2) == ";") => {
                    let name = at(1).to_string();
                    if cfg_test {
                        i = if at(2) == "{" {
                            skip_block(self.toks, i + 2)
                        } else {
                            i + 3
                        };
                    } else {
                        self.children.get_mut(module).unwrap().insert(name.clone());
                        let mut child = module.clone();
                        child.push(name);
                        i = if at(2) == "{" {
                            self.module(&child, i + 3)
                        } else {
                            i + 3
                        };
                    }
                    cfg_test = false;
                    continue;
                }
                "use" => {
                    i = self.use_tree(module, i + 1, Vec::new());
                    cfg_test = false;
                    continue;
                }
                "{" => depth += 1,
                "}" => {
                    if depth == 0 {
                        return i + 1;
                    }
                    depth -= 1;
                }
                _ if is_ident(text) && at(1) == "::" && (i == 0 || self.toks[i - 1].text != "::") => {
                    let mut segs = vec![text.to_string()];
                    let mut j = i + 1;
                    while self.toks.get(j).is_some_and(|t| t.text == "::")
                        && self.toks.get(j + 1).is_some_and(|t| is_ident(&t.text))
                    {
                        segs.push(self.toks[j + 1].text.clone());
                        j += 2;
                    }
                    self.note(module, &segs, t.line, false);
                    i = j;
                    continue;
                }
                _ => {}
            }
            if text != "pub" && text != "(" && text != ")" && text != "in" {
                cfg_test = cfg_test && (text == "#" || text == "[" || text == "]");
            }
            i += 1;
        }
        i
    }
}

fn skip_block(toks: &[Tok], open: usize) -> usize {
    let mut depth = 0usize;
    let mut i = open;
    while let Some(t) = toks.get(i) {
        match t.text.as_str() {
            "{" => depth += 1,
            "}" => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `src/fs/acl.rs` -> `crate::fs::acl`; `src/fs/mod.rs` -> `crate::fs`.
fn module_of(src: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut path = vec!["crate".to_string()];
    for c in rel.components() {
        let c = c.as_os_str().to_str().unwrap();
        if c != "lib" && c != "mod" {
            path.push(c.to_string());
        }
    }
    path
}

/// The module graph of the source under `src`: for each module, the
/// modules it names, each with one place that names it.
fn graph(src: &Path) -> BTreeMap<ModPath, BTreeMap<ModPath, String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut children: BTreeMap<ModPath, BTreeSet<String>> = BTreeMap::new();
    let mut refs = Vec::new();
    // Two passes: the first finds every module's children, so that the
    // second resolves a bare `child::item` in the parent.
    for pass in 0..2 {
        refs.clear();
        for f in &files {
            let code = clean(&std::fs::read_to_string(f).unwrap());
            let toks = tokens(&code);
            let module = module_of(src, f);
            let mut p = Parser {
                toks: &toks,
                file: f,
                children: &mut children,
                refs: &mut refs,
            };
            p.module(&module, 0);
        }
        let _ = pass;
    }
    let modules: BTreeSet<ModPath> = children.keys().cloned().collect();
    let mut g: BTreeMap<ModPath, BTreeMap<ModPath, String>> = BTreeMap::new();
    for m in &modules {
        g.entry(m.clone()).or_default();
    }
    for r in refs {
        // The module a path lands in: its longest prefix that is a module.
        let mut to = r.to.clone();
        while !to.is_empty() && !modules.contains(&to) {
            to.pop();
        }
        if to.is_empty() || to == r.from {
            continue;
        }
        let place = format!("{}:{}", r.file.strip_prefix(src).unwrap().display(), r.line);
        g.get_mut(&r.from).unwrap().entry(to).or_insert(place);
    }
    g
}

/// Tarjan's strongly connected components with more than one module.
fn circles(g: &BTreeMap<ModPath, BTreeMap<ModPath, String>>) -> Vec<Vec<ModPath>> {
    struct State<'a> {
        g: &'a BTreeMap<ModPath, BTreeMap<ModPath, String>>,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        on_stack: BTreeSet<&'a ModPath>,
        out: Vec<Vec<ModPath>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a ModPath) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.g[v].keys() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on_stack.remove(w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

fn name(m: &ModPath) -> String {
    m.join("::")
}

fn describe(g: &BTreeMap<ModPath, BTreeMap<ModPath, String>>, comp: &[ModPath]) -> String {
    let set: BTreeSet<&ModPath> = comp.iter().collect();
    let mut s = format!(
        "circle of {} modules: {}\n",
        comp.len(),
        comp.iter().map(name).collect::<Vec<_>>().join(", ")
    );
    for m in comp {
        for (to, place) in &g[m] {
            if set.contains(to) {
                s += &format!("  {} -> {}  ({place})\n", name(m), name(to));
            }
        }
    }
    s
}

#[test]
fn no_import_circle_between_the_crates_modules() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let g = graph(&src);
    let found = circles(&g);
    let report: String = found.iter().map(|c| describe(&g, c)).collect();
    assert!(found.is_empty(), "import circles in hipobj-store:\n{report}");
}

/// The judge judged: a circle it must see, and a tree it must pass.
#[test]
fn the_graph_sees_a_circle_and_passes_a_tree() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("a")).unwrap();
    std::fs::write(
        src.join("lib.rs"),
        "mod a;\nmod c;\n// crate::c::x in a comment\nconst S: &str = \"crate::a\";\n",
    )
    .unwrap();
    std::fs::write(
        src.join("a/mod.rs"),
        "mod b;\npub use b::X;\nfn f() { crate::c::g(); }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("a/b.rs"),
        "use super::super::c::{self, Y};\npub struct X;\n",
    )
    .unwrap();
    std::fs::write(
        src.join("c.rs"),
        "pub struct Y;\npub fn g() {}\n#[cfg(test)]\nmod tests { use crate::a::X; }\n",
    )
    .unwrap();
    let g = graph(src);
    assert!(circles(&g).is_empty(), "{g:?}");
    let edges = |m: &[&str]| -> Vec<String> {
        let m: ModPath = m.iter().map(|s| s.to_string()).collect();
        g[&m].keys().map(name).collect()
    };
    assert_eq!(edges(&["crate", "a"]), ["crate::a::b", "crate::c"]);
    assert_eq!(edges(&["crate", "a", "b"]), ["crate::c"]);
    assert!(edges(&["crate"]).is_empty());

    // c reaching back into a (outside its tests) closes a circle.
    std::fs::write(
        src.join("c.rs"),
        "pub struct Y;\npub fn g() { let _ = super::a::X; }\n",
    )
    .unwrap();
    let g = graph(src);
    let found = circles(&g);
    assert_eq!(found.len(), 1, "{g:?}");
    assert_eq!(
        found[0].iter().map(name).collect::<Vec<_>>(),
        ["crate::a", "crate::a::b", "crate::c"]
    );
}
