//! A tolerant parser of DiskSim 4.0's parameter format (libparam):
//! `type name { key = value, ... }` blocks at the top level, values that
//! are numbers, bare words, nested `type { ... }` blocks, lists
//! `[ a, b, ... ]`, or `source file` includes (parsed in place, relative
//! to the including file). `#` starts a comment. Statements this crate
//! does not use (`instantiate ... as ...`, `topology ...`) are read and
//! kept as raw text.
//!
//! Keys keep their spelling; lookups compare them case-insensitively
//! with runs of white space folded, so `Segment size (in blks)` matches
//! however the file spaces it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// Where something was read: file and line (1-based).
#[derive(Clone, Debug, PartialEq)]
pub struct Origin {
    pub file: Rc<PathBuf>,
    pub line: u32,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A number, kept with its spelling (integers stay exact).
    Number(f64, String),
    /// Anything else on one line: a name, a file name, `Parts`.
    Word(String),
    Block(Block),
    List(Vec<Value>),
    /// `name [ ... ]`, as in a topology.
    NamedList(String, Vec<Value>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Field {
    pub key: String,
    pub value: Value,
    pub origin: Origin,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    /// `disksim_disk`, `dm_layout_g1_zone`, ...
    pub type_name: String,
    /// The instance name after the type, at the top level.
    pub name: Option<String>,
    pub fields: Vec<Field>,
    pub origin: Origin,
}

/// A parsed file with its includes expanded.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ParamFile {
    pub blocks: Vec<Block>,
    /// Other top-level statements, raw (`instantiate [ disk0 ] as X`).
    pub statements: Vec<(String, Origin)>,
}

/// A parse or mapping error that names the file, the line and the key.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamError {
    pub origin: Option<Origin>,
    pub key: Option<String>,
    pub message: String,
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(o) = &self.origin {
            write!(f, "{o}: ")?;
        }
        if let Some(k) = &self.key {
            write!(f, "`{k}`: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ParamError {}

impl ParamError {
    pub fn at(origin: &Origin, key: Option<&str>, message: impl Into<String>) -> ParamError {
        ParamError {
            origin: Some(origin.clone()),
            key: key.map(str::to_string),
            message: message.into(),
        }
    }
}

/// Folds case and white space, for key comparison.
pub fn norm_key(k: &str) -> String {
    k.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_ascii_lowercase()
}

impl Value {
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Number(v, _) => Some(*v),
            _ => None,
        }
    }

    pub fn as_word(&self) -> Option<&str> {
        match self {
            Value::Word(w) => Some(w),
            Value::Number(_, raw) => Some(raw),
            _ => None,
        }
    }
}

impl Block {
    pub fn field(&self, key: &str) -> Option<&Field> {
        let k = norm_key(key);
        self.fields.iter().find(|f| norm_key(&f.key) == k)
    }

    fn missing(&self, key: &str) -> ParamError {
        ParamError::at(
            &self.origin,
            Some(key),
            format!(
                "missing in {} {}",
                self.type_name,
                self.name.as_deref().unwrap_or("")
            ),
        )
    }

    /// A required number.
    pub fn num(&self, key: &str) -> Result<f64, ParamError> {
        let f = self.field(key).ok_or_else(|| self.missing(key))?;
        f.value.as_f64().ok_or_else(|| {
            ParamError::at(
                &f.origin,
                Some(&f.key),
                format!("expected a number, found {:?}", f.value),
            )
        })
    }

    /// An optional number with a default.
    pub fn num_or(&self, key: &str, default: f64) -> Result<f64, ParamError> {
        match self.field(key) {
            None => Ok(default),
            Some(_) => self.num(key),
        }
    }

    /// A required whole number (no fraction, not negative unless allowed).
    pub fn int(&self, key: &str) -> Result<i64, ParamError> {
        let v = self.num(key)?;
        if v.fract() != 0.0 {
            let f = self.field(key).unwrap();
            return Err(ParamError::at(
                &f.origin,
                Some(&f.key),
                format!("expected a whole number, found {v}"),
            ));
        }
        Ok(v as i64)
    }

    pub fn int_or(&self, key: &str, default: i64) -> Result<i64, ParamError> {
        match self.field(key) {
            None => Ok(default),
            Some(_) => self.int(key),
        }
    }

    pub fn word(&self, key: &str) -> Result<&str, ParamError> {
        let f = self.field(key).ok_or_else(|| self.missing(key))?;
        f.value.as_word().ok_or_else(|| {
            ParamError::at(
                &f.origin,
                Some(&f.key),
                format!("expected a name, found {:?}", f.value),
            )
        })
    }

    pub fn block(&self, key: &str) -> Result<&Block, ParamError> {
        let f = self.field(key).ok_or_else(|| self.missing(key))?;
        match &f.value {
            Value::Block(b) => Ok(b),
            other => Err(ParamError::at(
                &f.origin,
                Some(&f.key),
                format!("expected a block, found {other:?}"),
            )),
        }
    }

    pub fn list(&self, key: &str) -> Result<&[Value], ParamError> {
        let f = self.field(key).ok_or_else(|| self.missing(key))?;
        match &f.value {
            Value::List(v) => Ok(v),
            other => Err(ParamError::at(
                &f.origin,
                Some(&f.key),
                format!("expected a list, found {other:?}"),
            )),
        }
    }
}

impl ParamFile {
    /// Reads `path` and every file it sources.
    pub fn load(path: &Path) -> Result<ParamFile, ParamError> {
        let mut out = ParamFile::default();
        load_into(path, &mut out, 0)?;
        Ok(out)
    }

    /// Parses text (includes resolve relative to `path`'s folder).
    pub fn parse_str(path: &Path, text: &str) -> Result<ParamFile, ParamError> {
        let mut out = ParamFile::default();
        Parser::new(path, text).top(&mut out, 0)?;
        Ok(out)
    }

    /// Top-level blocks of a type (`disksim_disk`).
    pub fn blocks_of<'a>(&'a self, type_name: &'a str) -> impl Iterator<Item = &'a Block> + 'a {
        self.blocks
            .iter()
            .filter(move |b| b.type_name.eq_ignore_ascii_case(type_name))
    }

    pub fn named(&self, name: &str) -> Option<&Block> {
        self.blocks
            .iter()
            .find(|b| b.name.as_deref().is_some_and(|n| n == name))
    }
}

const MAX_INCLUDE_DEPTH: u32 = 16;

fn load_into(path: &Path, out: &mut ParamFile, depth: u32) -> Result<(), ParamError> {
    let text = std::fs::read_to_string(path).map_err(|e| ParamError {
        origin: None,
        key: None,
        message: format!("cannot read {}: {e}", path.display()),
    })?;
    Parser::new(path, &text).top(out, depth)
}

/// Reads a sourced file and returns its single top-level block.
fn load_sourced_block(path: &Path, origin: &Origin, depth: u32) -> Result<Block, ParamError> {
    let mut sub = ParamFile::default();
    load_into(path, &mut sub, depth + 1)
        .map_err(|e| ParamError::at(origin, None, format!("in sourced file: {e}")))?;
    let mut blocks = sub.blocks.into_iter();
    match (blocks.next(), blocks.next()) {
        (Some(b), None) => Ok(b),
        _ => Err(ParamError::at(
            origin,
            None,
            format!("{} should hold exactly one block", path.display()),
        )),
    }
}

struct Parser<'a> {
    file: Rc<PathBuf>,
    dir: PathBuf,
    s: &'a [u8],
    i: usize,
    line: u32,
}

impl<'a> Parser<'a> {
    fn new(path: &Path, text: &'a str) -> Parser<'a> {
        Parser {
            file: Rc::new(path.to_path_buf()),
            dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
            s: text.as_bytes(),
            i: 0,
            line: 1,
        }
    }

    fn origin(&self) -> Origin {
        Origin {
            file: self.file.clone(),
            line: self.line,
        }
    }

    fn err(&self, key: Option<&str>, msg: impl Into<String>) -> ParamError {
        ParamError::at(&self.origin(), key, msg)
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn bump(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.i += 1;
        if c == b'\n' {
            self.line += 1;
        }
        Some(c)
    }

    /// Skips white space (newlines too unless `stop_at_newline`) and
    /// comments.
    fn skip_ws(&mut self, stop_at_newline: bool) {
        while let Some(c) = self.peek() {
            if c == b'#' {
                while let Some(c) = self.peek() {
                    if c == b'\n' {
                        break;
                    }
                    self.i += 1;
                }
            } else if c == b'\n' && stop_at_newline {
                return;
            } else if c.is_ascii_whitespace() {
                self.bump();
            } else {
                return;
            }
        }
    }

    /// Raw text up to (not including) any byte of `stops`, a newline or
    /// a comment; trimmed.
    fn raw_until(&mut self, stops: &[u8]) -> String {
        let start = self.i;
        while let Some(c) = self.peek() {
            if stops.contains(&c) || c == b'\n' || c == b'#' {
                break;
            }
            self.i += 1;
        }
        String::from_utf8_lossy(&self.s[start..self.i])
            .trim()
            .to_string()
    }

    fn top(&mut self, out: &mut ParamFile, depth: u32) -> Result<(), ParamError> {
        if depth > MAX_INCLUDE_DEPTH {
            return Err(self.err(None, "`source` nested too deeply"));
        }
        loop {
            self.skip_ws(false);
            let Some(_) = self.peek() else {
                return Ok(());
            };
            let origin = self.origin();
            let head = self.raw_until(b"{[");
            match self.peek() {
                Some(b'{') => {
                    self.bump();
                    let mut words = head.split_whitespace();
                    let type_name = words
                        .next()
                        .ok_or_else(|| self.err(None, "a block without a type name"))?
                        .to_string();
                    let name = words.next().map(str::to_string);
                    let fields = self.fields(depth)?;
                    out.blocks.push(Block {
                        type_name,
                        name,
                        fields,
                        origin,
                    });
                }
                Some(b'[') => {
                    // instantiate [ a, b ] as X  /  topology t n [ ... ]
                    self.bump();
                    let items = self.list_items(depth)?;
                    let rest = self.raw_until(b"{[");
                    let mut text = head;
                    text.push_str(&format!(" [{} items] {rest}", items.len()));
                    out.statements.push((text, origin));
                }
                _ => {
                    if let Some(file) = head.strip_prefix("source") {
                        let file = file.trim();
                        if file.is_empty() {
                            return Err(ParamError::at(&origin, None, "`source` without a file"));
                        }
                        let path = self.dir.join(file);
                        let mut sub = ParamFile::default();
                        load_into(&path, &mut sub, depth + 1).map_err(|e| {
                            ParamError::at(&origin, None, format!("in sourced file: {e}"))
                        })?;
                        out.blocks.extend(sub.blocks);
                        out.statements.extend(sub.statements);
                    } else if !head.is_empty() {
                        out.statements.push((head, origin));
                    } else {
                        // A stray character (`}` or `]`): step over it.
                        let c = self.bump().unwrap_or(b' ');
                        return Err(ParamError::at(
                            &origin,
                            None,
                            format!("unexpected `{}` at the top level", c as char),
                        ));
                    }
                }
            }
        }
    }

    /// `key = value` pairs up to the closing `}` (consumed).
    fn fields(&mut self, depth: u32) -> Result<Vec<Field>, ParamError> {
        self.delimited(b'}', "block", |p| p.field(depth))
    }

    fn field(&mut self, depth: u32) -> Result<Field, ParamError> {
        let origin = self.origin();
        let key = self.raw_until(b"=}{[],");
        if self.peek() != Some(b'=') {
            return Err(ParamError::at(
                &origin,
                Some(&key),
                "expected `=` after the key",
            ));
        }
        self.bump();
        let value = self.value(depth, &key)?;
        Ok(Field { key, value, origin })
    }

    /// What `item` reads, up to `close` (consumed), with commas between
    /// (and stray ones) stepped over; `what` names the brackets in the
    /// error an unclosed one gives.
    fn delimited<T>(
        &mut self,
        close: u8,
        what: &str,
        mut item: impl FnMut(&mut Self) -> Result<T, ParamError>,
    ) -> Result<Vec<T>, ParamError> {
        let mut items = Vec::new();
        loop {
            self.skip_ws(false);
            match self.peek() {
                None => {
                    let close = close as char;
                    let msg = format!("end of file inside a {what} (missing `{close}`)");
                    return Err(self.err(None, msg));
                }
                Some(c) if c == close => {
                    self.bump();
                    return Ok(items);
                }
                Some(b',') => {
                    self.bump();
                    continue;
                }
                _ => {}
            }
            items.push(item(self)?);
        }
    }

    fn value(&mut self, depth: u32, key: &str) -> Result<Value, ParamError> {
        self.skip_ws(false);
        let origin = self.origin();
        if self.peek() == Some(b'[') {
            self.bump();
            return Ok(Value::List(self.list_items(depth)?));
        }
        let raw = self.raw_until(b",{}[]");
        match self.peek() {
            Some(b'{') => {
                self.bump();
                let mut words = raw.split_whitespace();
                let type_name = words.next().unwrap_or("").to_string();
                let name = words.next().map(str::to_string);
                let fields = self.fields(depth)?;
                return Ok(Value::Block(Block {
                    type_name,
                    name,
                    fields,
                    origin,
                }));
            }
            Some(b'[') => {
                self.bump();
                return Ok(Value::NamedList(raw, self.list_items(depth)?));
            }
            _ => {}
        }
        if raw.is_empty() {
            return Err(ParamError::at(&origin, Some(key), "missing value"));
        }
        if let Some(file) = raw.strip_prefix("source ") {
            let path = self.dir.join(file.trim());
            return Ok(Value::Block(load_sourced_block(&path, &origin, depth)?));
        }
        Ok(scalar(raw))
    }

    /// List items up to the closing `]` (consumed).
    fn list_items(&mut self, depth: u32) -> Result<Vec<Value>, ParamError> {
        self.delimited(b']', "list", |p| p.value(depth, "list item"))
    }
}

fn scalar(raw: String) -> Value {
    match raw.parse::<f64>() {
        Ok(v) if v.is_finite() => Value::Number(v, raw),
        _ => Value::Word(raw),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_lists_and_comments() {
        let text = "# top\ndisksim_disk D0 {\n  Segment size (in blks) = 561,\n  Model = dm_disk { Zones = [ z { a = 1 }, z { a = 2 } ], slips = [] },\n  Seek type = extracted # c\n}\ninstantiate [ disk0 ] as D0\n";
        let f = ParamFile::parse_str(Path::new("x.parv"), text).unwrap();
        assert_eq!(f.blocks.len(), 1);
        let b = &f.blocks[0];
        assert_eq!(b.name.as_deref(), Some("D0"));
        assert_eq!(b.int("segment   size (in BLKS)").unwrap(), 561);
        assert_eq!(b.word("Seek type").unwrap(), "extracted");
        let m = b.block("Model").unwrap();
        assert_eq!(m.list("Zones").unwrap().len(), 2);
        assert_eq!(m.list("slips").unwrap().len(), 0);
        assert_eq!(f.statements.len(), 1);
    }

    #[test]
    fn errors_name_file_line_and_key() {
        let text = "b X {\n a = 1,\n bad key 2\n}\n";
        let e = ParamFile::parse_str(Path::new("f.parv"), text).unwrap_err();
        let s = e.to_string();
        assert!(s.starts_with("f.parv:3: `bad key 2`"), "{s}");
        let text = "b X {\n a = oops\n}\n";
        let f = ParamFile::parse_str(Path::new("f.parv"), text).unwrap();
        let e = f.blocks[0].num("a").unwrap_err().to_string();
        assert!(e.starts_with("f.parv:2: `a`: expected a number"), "{e}");
    }
}
