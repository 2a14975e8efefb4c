//! The volumes file (`/etc/platter/volumes.toml`): what `platter serve
//! --config FILE NAME` needs to serve a volume, so that a unit file holds
//! one line. The file's format is in docs/config.md.
//!
//! A volume's table becomes `serve`'s own command line (its socket, its
//! members or where to scan for them, and any `serve` option under
//! `options`), which clap then parses like any other: every option means
//! in the file what it means on the command line, and options given on
//! the command line as well win. Errors name the file and the line.

use crate::error::{CliError, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use toml::Spanned;

/// A config file bigger than this is not a config file.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default)]
    volumes: BTreeMap<String, Spanned<VolumeConfig>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VolumeConfig {
    /// The members by path or URI.
    members: Option<Spanned<Vec<Spanned<String>>>>,
    /// Or where to find them by label (`serve --scan`); with `pool`,
    /// where to find the pool's drives.
    scan: Option<Spanned<Vec<String>>>,
    /// Or a pool, every volume of it served (`serve --pool`).
    pool: Option<Spanned<String>>,
    /// With `scan`: the volume's uuid, when its name is not enough.
    uuid: Option<String>,
    socket: Option<Spanned<String>>,
    listen: Option<Spanned<String>>,
    /// Any other `serve` option by its long name.
    #[serde(default)]
    options: BTreeMap<Spanned<String>, Spanned<toml::Value>>,
}

/// Options a volume's table sets by their own keys, or that make no sense
/// in a file.
const NOT_OPTIONS: &[&str] = &[
    "socket", "listen", "scan", "pool", "name", "uuid", "config", "help",
];

/// Options for one start, given on the command line when needed: in a file
/// they would act at every start (`discard-log` would throw away the log
/// of every unclean stop).
const ONE_START_OPTIONS: &[&str] = &["discard-log"];

/// `serve`'s command line for volume `name` of `file`: the options the
/// file gives, then `given` (the command line's own arguments after
/// `serve`, less `--config FILE NAME`), so that those win.
pub fn serve_argv(
    file: &Path,
    name: &str,
    serve_options: &clap::Command,
    given: Vec<OsString>,
) -> Result<Vec<OsString>> {
    let shown = file.display();
    let meta = std::fs::metadata(file).map_err(|e| CliError(format!("{shown}: {e}")))?;
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(CliError(format!(
            "{shown}: {} bytes; a volumes file is at most {MAX_CONFIG_BYTES}",
            meta.len()
        )));
    }
    let text = std::fs::read_to_string(file).map_err(|e| CliError(format!("{shown}: {e}")))?;
    let at = |span: std::ops::Range<usize>| format!("{shown}:{}", line_of(&text, span.start));
    let parsed: ConfigFile = toml::from_str(&text).map_err(|e| {
        let line = e
            .span()
            .map_or(String::new(), |s| format!(":{}", line_of(&text, s.start)));
        CliError(format!("{shown}{line}: {}", e.message()))
    })?;
    check_unique(&parsed, &at)?;
    let Some(volume) = parsed.volumes.get(name) else {
        let names: Vec<&str> = parsed.volumes.keys().map(String::as_str).collect();
        return Err(CliError(format!(
            "{shown}: no volume '{name}' (the file names {})",
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        )));
    };
    let here = at(volume.span());
    let v = volume.get_ref();
    let mut argv: Vec<OsString> = Vec::new();
    if let Some(s) = &v.socket {
        argv.extend(["--socket".into(), s.get_ref().into()]);
    }
    if let Some(l) = &v.listen {
        argv.extend(["--listen".into(), l.get_ref().into()]);
    }
    for (key, value) in &v.options {
        option_args(key, value, serve_options, &at, &mut argv)?;
    }
    if let Some(pool) = &v.pool {
        pool_args(name, v, pool, &at, given, &mut argv)?;
    } else {
        member_args(name, v, &here, &at, given, &mut argv)?;
    }
    Ok(argv)
}

/// A volume's table: its members by path, or `--scan` and where, with
/// the volume's name or uuid.
fn member_args(
    name: &str,
    v: &VolumeConfig,
    here: &str,
    at: &dyn Fn(std::ops::Range<usize>) -> String,
    given: Vec<OsString>,
    argv: &mut Vec<OsString>,
) -> Result<()> {
    match (&v.members, &v.scan) {
        (Some(_), Some(_)) | (None, None) => {
            return Err(CliError(format!(
                "{here}: volume '{name}' needs `members`, `scan` or `pool`, one of them"
            )))
        }
        (Some(members), None) => {
            if members.get_ref().is_empty() {
                return Err(CliError(format!(
                    "{}: volume '{name}': `members` is empty",
                    at(members.span())
                )));
            }
            argv.extend(given);
            for m in members.get_ref() {
                let path = m.get_ref();
                // A mistyped path is the file's error, named by its line;
                // a member that is unplugged is left out at assembly like
                // any other missing member (remove it from the file, or
                // the volume starts degraded each time).
                if !path.contains("://") && std::fs::symlink_metadata(path).is_err() {
                    return Err(CliError(format!(
                        "{}: volume '{name}': member {path} does not exist",
                        at(m.span())
                    )));
                }
                argv.push(path.into());
            }
        }
        (None, Some(paths)) => {
            argv.push("--scan".into());
            argv.extend(paths.get_ref().iter().map(OsString::from));
            match &v.uuid {
                Some(u) => argv.extend(["--uuid".into(), u.into()]),
                None => argv.extend(["--name".into(), name.into()]),
            }
            argv.extend(given);
        }
    }
    if v.uuid.is_some() && v.scan.is_none() {
        return Err(CliError(format!(
            "{here}: volume '{name}': `uuid` picks among volumes found by `scan`; with \
             `members` the labels say which volume it is"
        )));
    }
    Ok(())
}

/// A pool's table: `--pool POOL`, then the paths its drives are found
/// under (every block device in /dev without `scan`).
fn pool_args(
    name: &str,
    v: &VolumeConfig,
    pool: &Spanned<String>,
    at: &dyn Fn(std::ops::Range<usize>) -> String,
    given: Vec<OsString>,
    argv: &mut Vec<OsString>,
) -> Result<()> {
    if v.members.is_some() || v.uuid.is_some() {
        return Err(CliError(format!(
            "{}: volume '{name}': `pool` serves the pool's volumes from its drives; \
             `members` and `uuid` do not go with it (`scan` says where the drives are)",
            at(pool.span())
        )));
    }
    argv.extend(["--pool".into(), pool.get_ref().into()]);
    argv.extend(given);
    if let Some(paths) = &v.scan {
        argv.extend(paths.get_ref().iter().map(OsString::from));
    }
    Ok(())
}

/// `--key VALUE` for one entry of `options`: `true` is the bare flag,
/// `false` leaves it out, an array repeats the option.
fn option_args(
    key: &Spanned<String>,
    value: &Spanned<toml::Value>,
    serve_options: &clap::Command,
    at: &dyn Fn(std::ops::Range<usize>) -> String,
    argv: &mut Vec<OsString>,
) -> Result<()> {
    let k = key.get_ref();
    let known = serve_options
        .get_arguments()
        .find(|a| a.get_long() == Some(k.as_str()));
    let refused = NOT_OPTIONS.contains(&k.as_str()) || ONE_START_OPTIONS.contains(&k.as_str());
    let Some(arg) = known.filter(|_| !refused) else {
        let why = if NOT_OPTIONS.contains(&k.as_str()) {
            "is not set under `options` (give it as the volume's own key)".to_string()
        } else if ONE_START_OPTIONS.contains(&k.as_str()) {
            format!("is for one start, not every one: give --{k} on the command line")
        } else {
            "is not an option of `platter serve` (see platter serve --help)".to_string()
        };
        return Err(CliError(format!("{}: option '{k}' {why}", at(key.span()))));
    };
    let takes_value = arg.get_action().takes_values();
    let flag = OsString::from(format!("--{k}"));
    let start = argv.len();
    let scalar = |v: &toml::Value| -> Result<OsString> {
        Ok(match v {
            toml::Value::String(s) => s.into(),
            toml::Value::Integer(i) => i.to_string().into(),
            toml::Value::Float(f) => f.to_string().into(),
            _ => {
                return Err(CliError(format!(
                    "{}: option '{k}' wants a string or a number",
                    at(value.span())
                )))
            }
        })
    };
    match value.get_ref() {
        toml::Value::Boolean(b) if !takes_value => {
            if *b {
                argv.push(flag);
            }
        }
        _ if !takes_value => {
            return Err(CliError(format!(
                "{}: option '{k}' is a switch: true or false",
                at(value.span())
            )))
        }
        toml::Value::Array(items) => {
            for item in items {
                argv.extend([flag.clone(), scalar(item)?]);
            }
        }
        v => argv.extend([flag, scalar(v)?]),
    }
    // The value checked now, so that its error names the line: parsed
    // alone with a stand-in member, as the command line would parse it.
    let alone = std::iter::once(OsString::from("serve"))
        .chain(argv[start..].iter().cloned())
        .chain(std::iter::once(OsString::from("member")));
    if let Err(e) = serve_options.clone().try_get_matches_from(alone) {
        let text = e.to_string();
        let first = text.lines().next().unwrap_or_default();
        return Err(CliError(format!(
            "{}: option '{k}': {}",
            at(value.span()),
            first.trim_start_matches("error: ")
        )));
    }
    Ok(())
}

/// Two volumes on one socket or one address would fight over it: the
/// second server replaces the first's socket.
fn check_unique(file: &ConfigFile, at: &dyn Fn(std::ops::Range<usize>) -> String) -> Result<()> {
    let mut seen: BTreeMap<(&str, &str), (&str, std::ops::Range<usize>)> = BTreeMap::new();
    for (name, v) in &file.volumes {
        let v = v.get_ref();
        let endpoints = [("socket", &v.socket), ("listen", &v.listen)];
        for (what, value) in endpoints {
            let Some(value) = value else { continue };
            if let Some((other, span)) = seen.insert((what, value.get_ref()), (name, value.span()))
            {
                return Err(CliError(format!(
                    "{}: volume '{name}' has the {what} {} of volume '{other}' ({})",
                    at(value.span()),
                    value.get_ref(),
                    at(span)
                )));
            }
        }
    }
    Ok(())
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}
