//! The pool's configuration as text, in the shape of vinum's
//! configuration file: one object a line, a keyword first, then
//! `key value` pairs. `printconfig` prints it, the pool area keeps it,
//! `pool create --config` takes it back.
//!
//! ```text
//! pool tank uuid 6f1c…-… generation 3
//! drive d0 uuid 0a2b…-… size 209715200s device /dev/sdb
//! drive d4 uuid 5c9e…-… size 209715200s device /dev/sdf state spare
//! volume db
//! plex name db.p0 org raid10 interleave 128s layout left-symmetric copies 2 vol db
//! sd name db.p0.s0 drive d0 driveoffset 2048s len 204800s plex db.p0
//! move sd db.p0.s0 drive d4 driveoffset 2048s copied 65536s
//! ```
//!
//! Sizes are written in sectors (`s`), as vinum's `printconfig` does, and
//! read with any unit (`64k`, `100M`). A plex follows its volume and a
//! subdisk its plex; subdisks take the plex's slots in the order written.
//! `#` starts a comment.

use super::{
    parse_uuid, split_plex_name, uuid_text, DetachedPlex, Drive, DriveState, Plex, PlexConvert,
    Pool, PoolVolume, Subdisk, SubdiskMove, VolumeCopy,
};
use crate::level::{Level, ParityLayout};
use crate::units::{parse_size, SECTOR_BYTES};

/// The text of `pool`. [`parse`] gives `pool` back.
pub fn render(pool: &Pool) -> String {
    let mut out =
        String::from("# platter pool configuration (vinum's shape; sizes in 512-byte sectors)\n");
    out += &format!(
        "pool {} uuid {} generation {}\n",
        pool.name,
        uuid_text(&pool.uuid),
        pool.generation
    );
    for d in &pool.drives {
        out += &format!(
            "drive {} uuid {} size {} device {}",
            d.name,
            uuid_text(&d.uuid),
            sectors(d.size_bytes),
            d.device
        );
        // Written only when not up: a pool without spares or failed
        // drives reads the same as before drives had a state.
        if d.state != DriveState::Up {
            out += &format!(" state {}", d.state.name());
        }
        out.push('\n');
    }
    for v in &pool.volumes {
        match v.size_bytes {
            Some(s) => out += &format!("volume {} size {}\n", v.name, sectors(s)),
            None => out += &format!("volume {}\n", v.name),
        }
        for (p, plex) in v.plexes.iter().enumerate() {
            render_plex(&mut out, v, p, plex);
        }
        if let Some(c) = pool.copy_of(&v.name) {
            render_plex(&mut out, v, v.plexes.len(), &c.plex);
        }
    }
    for m in &pool.moves {
        out += &format!(
            "move sd {} drive {} driveoffset {} copied {}\n",
            m.subdisk_name(),
            m.drive,
            sectors(m.offset_bytes),
            sectors(m.copied_bytes)
        );
    }
    for d in &pool.detached {
        out += &format!("detach plex {}", d.plex_name());
        if let Some(name) = &d.as_volume {
            out += &format!(" as {name}");
        }
        out += if d.writable {
            " access rw\n"
        } else {
            " access ro\n"
        };
    }
    for c in &pool.converts {
        out += &format!(
            "convert plex {}.p{} into {}.p{}\n",
            c.volume, c.from, c.volume, c.into
        );
    }
    for c in &pool.copies {
        out += &format!(
            "convert plex {0}.p0 into {0}.p1 copied {1}\n",
            c.volume,
            sectors(c.copied_bytes)
        );
    }
    out
}

fn render_plex(out: &mut String, v: &PoolVolume, p: usize, plex: &Plex) {
    *out += &format!(
        "plex name {} org {} interleave {} layout {} copies {} vol {}\n",
        v.plex_name(p),
        plex.org,
        sectors(plex.interleave_bytes),
        plex.parity_layout,
        plex.copies,
        v.name
    );
    for (s, sd) in plex.subdisks.iter().enumerate() {
        *out += &format!(
            "sd name {} drive {} driveoffset {} len {} plex {}\n",
            v.subdisk_name(p, s),
            sd.drive,
            sectors(sd.offset_bytes),
            sectors(sd.len_bytes),
            v.plex_name(p)
        );
    }
}

/// Sizes are whole sectors (`Pool::check`); a stray remainder is written
/// in bytes so that nothing is rounded away.
fn sectors(bytes: u64) -> String {
    if bytes.is_multiple_of(SECTOR_BYTES) {
        format!("{}s", bytes / SECTOR_BYTES)
    } else {
        bytes.to_string()
    }
}

/// What a configuration file may leave out: a hand-written file for
/// `pool create --config` has no uuids or generation yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strictness {
    /// As the pool area holds it: every uuid and the generation present.
    Stored,
    /// A file to create a pool from: missing uuids are zero, to be made.
    Template,
}

/// Reads a configuration. Errors name the line and the word at fault,
/// and nothing is checked against drives here: [`Pool::check`] follows.
pub fn parse(text: &str, strictness: Strictness) -> Result<Pool, String> {
    let mut b = Builder::default();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("");
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.is_empty() {
            continue;
        }
        b.line(&words, strictness)
            .map_err(|e| format!("line {}: {e}", i + 1))?;
    }
    b.finish(strictness)
}

#[derive(Default)]
struct Builder {
    pool: Option<Pool>,
    drives: Vec<Drive>,
    volumes: Vec<PoolVolume>,
    moves: Vec<SubdiskMove>,
    detached: Vec<DetachedPlex>,
    /// Each with the `copied` it was written with (a copy's checkpoint).
    converts: Vec<(PlexConvert, Option<u64>)>,
}

/// The `key value` pairs after a line's leading words, each key once and
/// known.
struct Pairs<'a> {
    what: &'static str,
    pairs: Vec<(&'a str, &'a str)>,
}

impl<'a> Pairs<'a> {
    fn new(what: &'static str, words: &[&'a str], known: &[&str]) -> Result<Self, String> {
        if !words.len().is_multiple_of(2) {
            return Err(format!(
                "{what}: '{}' has no value (words come in pairs: key value)",
                words[words.len() - 1]
            ));
        }
        let mut pairs: Vec<(&str, &str)> = Vec::new();
        for kv in words.chunks(2) {
            let key = kv[0];
            if !known.contains(&key) {
                return Err(unknown_word(what, key, known));
            }
            if pairs.iter().any(|(k, _)| *k == key) {
                return Err(format!("{what}: '{key}' is given twice"));
            }
            pairs.push((key, kv[1]));
        }
        Ok(Pairs { what, pairs })
    }

    fn get(&self, key: &str) -> Option<&'a str> {
        self.pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    fn need(&self, key: &str) -> Result<&'a str, String> {
        self.get(key)
            .ok_or_else(|| format!("{} has no '{key}'", self.what))
    }

    fn size(&self, key: &str) -> Result<Option<u64>, String> {
        self.get(key)
            .map(|v| parse_size(v).map_err(|e| format!("{} {key}: {e}", self.what)))
            .transpose()
    }

    fn uuid(&self, strictness: Strictness) -> Result<[u8; 16], String> {
        match (self.get("uuid"), strictness) {
            (Some(u), _) => parse_uuid(u).map_err(|e| format!("{}: {e}", self.what)),
            (None, Strictness::Template) => Ok([0; 16]),
            (None, Strictness::Stored) => Err(format!("{} has no 'uuid'", self.what)),
        }
    }
}

/// Says which word was meant when a key is misspelt by a letter or two.
fn unknown_word(what: &str, word: &str, known: &[&str]) -> String {
    let near = known
        .iter()
        .filter(|k| edit_distance(k, word) <= 2)
        .min_by_key(|k| edit_distance(k, word));
    let expected = known.join(", ");
    match near {
        Some(k) => {
            format!("{what}: unknown word '{word}' (did you mean '{k}'? expected {expected})")
        }
        None => format!("{what}: unknown word '{word}' (expected {expected})"),
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(here + 1);
            prev = here;
        }
    }
    row[b.len()]
}

impl Builder {
    fn line(&mut self, words: &[&str], strictness: Strictness) -> Result<(), String> {
        match words[0] {
            "pool" => self.pool_line(words, strictness),
            "drive" => self.drive_line(words, strictness),
            "volume" => self.volume_line(words),
            "plex" => self.plex_line(words),
            "sd" => self.sd_line(words),
            "move" => self.move_line(words),
            "detach" => self.detach_line(words),
            "convert" => self.convert_line(words),
            other => Err(unknown_word(
                "a line",
                other,
                &[
                    "pool", "drive", "volume", "plex", "sd", "move", "detach", "convert",
                ],
            )),
        }
    }

    fn pool_line(&mut self, words: &[&str], strictness: Strictness) -> Result<(), String> {
        if self.pool.is_some() {
            return Err("a second 'pool' line; a configuration is one pool".into());
        }
        let name = *words.get(1).ok_or("'pool' needs a name")?;
        let pairs = Pairs::new("the pool", &words[2..], &["uuid", "generation"])?;
        let generation = match (pairs.get("generation"), strictness) {
            (Some(g), _) => g
                .parse::<u64>()
                .map_err(|_| format!("the pool's generation '{g}' is not a whole number"))?,
            (None, Strictness::Template) => 1,
            (None, Strictness::Stored) => return Err("the pool has no 'generation'".into()),
        };
        self.pool = Some(Pool {
            name: name.to_string(),
            uuid: pairs.uuid(strictness)?,
            generation,
            drives: Vec::new(),
            volumes: Vec::new(),
            moves: Vec::new(),
            detached: Vec::new(),
            converts: Vec::new(),
            copies: Vec::new(),
        });
        Ok(())
    }

    fn drive_line(&mut self, words: &[&str], strictness: Strictness) -> Result<(), String> {
        let name = *words.get(1).ok_or("'drive' needs a name")?;
        let known = ["uuid", "size", "device", "state"];
        let pairs = Pairs::new("a drive", &words[2..], &known)?;
        let state = match pairs.get("state") {
            Some(w) => DriveState::parse(w).map_err(|e| format!("drive {name}: {e}"))?,
            None => DriveState::Up,
        };
        let size_bytes = match (pairs.size("size")?, strictness) {
            (Some(s), _) => s,
            // Taken from the device when the pool is made.
            (None, Strictness::Template) => 0,
            (None, Strictness::Stored) => return Err(format!("drive {name} has no 'size'")),
        };
        self.drives.push(Drive {
            name: name.to_string(),
            uuid: pairs.uuid(strictness)?,
            size_bytes,
            device: pairs.get("device").unwrap_or("").to_string(),
            state,
        });
        Ok(())
    }

    fn volume_line(&mut self, words: &[&str]) -> Result<(), String> {
        let name = *words.get(1).ok_or("'volume' needs a name")?;
        let pairs = Pairs::new("a volume", &words[2..], &["size"])?;
        self.volumes.push(PoolVolume {
            name: name.to_string(),
            size_bytes: pairs.size("size")?,
            plexes: Vec::new(),
        });
        Ok(())
    }

    fn plex_line(&mut self, words: &[&str]) -> Result<(), String> {
        let known = ["name", "org", "interleave", "layout", "copies", "vol"];
        let pairs = Pairs::new("a plex", &words[1..], &known)?;
        let v = self.volume_named(pairs.need("vol")?, "plex")?;
        let expected = v.plex_name(v.plexes.len());
        if let Some(name) = pairs.get("name").filter(|n| *n != expected) {
            return Err(format!(
                "plex {name}: the next plex of volume {} is {expected}",
                v.name
            ));
        }
        let org: Level = pairs.need("org")?.parse()?;
        let parity_layout = match pairs.get("layout") {
            Some(l) => l.parse::<ParityLayout>()?,
            None => ParityLayout::DEFAULT,
        };
        let copies = match pairs.get("copies") {
            Some(c) => c
                .parse::<u32>()
                .map_err(|_| format!("plex {expected}: copies '{c}' is not a whole number"))?,
            // Settled once the plex's subdisks are known (`finish`).
            None => 0,
        };
        v.plexes.push(Plex {
            org,
            interleave_bytes: pairs.size("interleave")?.unwrap_or(64 * 1024),
            parity_layout,
            copies,
            subdisks: Vec::new(),
        });
        Ok(())
    }

    fn sd_line(&mut self, words: &[&str]) -> Result<(), String> {
        let known = ["name", "drive", "driveoffset", "len", "length", "plex"];
        let pairs = Pairs::new("a subdisk", &words[1..], &known)?;
        let plex_name = pairs.need("plex")?;
        let (vol, p) = plex_name
            .rsplit_once(".p")
            .and_then(|(v, p)| Some((v, p.parse::<usize>().ok()?)))
            .ok_or_else(|| format!("subdisk's plex '{plex_name}' is not named VOLUME.pN"))?;
        let v = self.volume_named(vol, "subdisk")?;
        let s = v
            .plexes
            .get(p)
            .map(|x| x.subdisks.len())
            .ok_or_else(|| format!("subdisk's plex '{plex_name}' is not written before it"))?;
        let expected = v.subdisk_name(p, s);
        if let Some(name) = pairs.get("name").filter(|n| *n != expected) {
            return Err(format!(
                "subdisk {name}: the next subdisk of plex {plex_name} is {expected}"
            ));
        }
        let len = match (pairs.size("len")?, pairs.size("length")?) {
            (Some(l), None) | (None, Some(l)) => l,
            (Some(_), Some(_)) => {
                return Err(format!("subdisk {expected}: 'len' and 'length' both given"))
            }
            (None, None) => return Err(format!("subdisk {expected} has no 'len'")),
        };
        let offset = pairs
            .size("driveoffset")?
            .ok_or_else(|| format!("subdisk {expected} has no 'driveoffset'"))?;
        v.plexes[p].subdisks.push(Subdisk {
            drive: pairs.need("drive")?.to_string(),
            offset_bytes: offset,
            len_bytes: len,
        });
        Ok(())
    }

    /// `move sd V.pN.sM drive D driveoffset S copied S`: whether the
    /// subdisk is there is `Pool::check`'s to say.
    fn move_line(&mut self, words: &[&str]) -> Result<(), String> {
        let known = ["sd", "drive", "driveoffset", "copied"];
        let pairs = Pairs::new("a move", &words[1..], &known)?;
        let name = pairs.need("sd")?;
        let (plex, slot) = name
            .rsplit_once(".s")
            .and_then(|(plex, s)| Some((plex, s.parse::<usize>().ok()?)))
            .ok_or_else(|| format!("move: subdisk '{name}' is not named VOLUME.pN.sM"))?;
        let (volume, plex) = split_plex_name(plex)
            .ok_or_else(|| format!("move: subdisk '{name}' is not named VOLUME.pN.sM"))?;
        self.moves.push(SubdiskMove {
            volume: volume.to_string(),
            plex,
            slot,
            drive: pairs.need("drive")?.to_string(),
            offset_bytes: pairs
                .size("driveoffset")?
                .ok_or_else(|| format!("move of {name} has no 'driveoffset'"))?,
            copied_bytes: pairs.size("copied")?.unwrap_or(0),
        });
        Ok(())
    }

    /// `detach plex V.pN [as NAME] access ro|rw`.
    fn detach_line(&mut self, words: &[&str]) -> Result<(), String> {
        let known = ["plex", "as", "access"];
        let pairs = Pairs::new("a detached plex", &words[1..], &known)?;
        let name = pairs.need("plex")?;
        let (volume, plex) = split_plex_name(name)
            .ok_or_else(|| format!("detach: plex '{name}' is not named VOLUME.pN"))?;
        let writable = match pairs.get("access").unwrap_or("ro") {
            "ro" => false,
            "rw" => true,
            other => {
                return Err(format!(
                    "detach of {name}: access '{other}' is not one of ro, rw"
                ))
            }
        };
        self.detached.push(DetachedPlex {
            volume: volume.to_string(),
            plex,
            as_volume: pairs.get("as").map(str::to_string),
            writable,
        });
        Ok(())
    }

    /// `convert plex V.pN into V.pM`.
    fn convert_line(&mut self, words: &[&str]) -> Result<(), String> {
        let pairs = Pairs::new("a convert", &words[1..], &["plex", "into", "copied"])?;
        let plex = |key: &str| {
            let name = pairs.need(key)?;
            split_plex_name(name)
                .ok_or_else(|| format!("convert: plex '{name}' is not named VOLUME.pN"))
        };
        let (volume, from) = plex("plex")?;
        let (other, into) = plex("into")?;
        if other != volume {
            return Err(format!(
                "convert: plex {volume}.p{from} into a plex of another volume ({other})"
            ));
        }
        let c = PlexConvert {
            volume: volume.to_string(),
            from,
            into,
        };
        self.converts.push((c, pairs.size("copied")?));
        Ok(())
    }

    fn volume_named(&mut self, name: &str, what: &str) -> Result<&mut PoolVolume, String> {
        self.volumes
            .iter_mut()
            .rev()
            .find(|v| v.name == name)
            .ok_or_else(|| format!("the {what}'s volume '{name}' is not written before it"))
    }

    fn finish(self, strictness: Strictness) -> Result<Pool, String> {
        let mut pool = self.pool.ok_or("no 'pool' line")?;
        pool.drives = self.drives;
        pool.volumes = self.volumes;
        pool.moves = self.moves;
        pool.detached = self.detached;
        let converts = self.converts;
        for plex in pool.volumes.iter_mut().flat_map(|v| v.plexes.iter_mut()) {
            if plex.copies == 0 {
                plex.copies = default_copies(plex.org, plex.subdisks.len() as u32);
            }
        }
        (pool.converts, pool.copies) = take_copies(&mut pool.volumes, converts)?;
        if strictness == Strictness::Stored {
            pool.check()?;
        }
        Ok(pool)
    }
}

/// The converts of volumes of one plex (two plexes written, `convert plex
/// V.p0 into V.p1`: no mirror has a slot for the new plex) taken out as
/// copies, their new plexes out of the volumes; the others stay converts,
/// which have no `copied`.
fn take_copies(
    volumes: &mut [PoolVolume],
    converts: Vec<(PlexConvert, Option<u64>)>,
) -> Result<(Vec<PlexConvert>, Vec<VolumeCopy>), String> {
    let (mut plain, mut copies) = (Vec::new(), Vec::new());
    for (c, copied) in converts {
        let v = volumes.iter_mut().find(|v| v.name == c.volume);
        match v {
            Some(v) if v.plexes.len() == 2 && (c.from, c.into) == (0, 1) => {
                copies.push(VolumeCopy {
                    volume: c.volume.clone(),
                    plex: v.plexes.pop().expect("two plexes"),
                    copied_bytes: copied.unwrap_or(0),
                });
            }
            _ if copied.is_some() => {
                return Err(format!(
                    "convert plex {}.p{}: `copied` is a convert of a volume of one plex's",
                    c.volume, c.from
                ))
            }
            _ => plain.push(c),
        }
    }
    Ok((plain, copies))
}

/// A mirror copies to every subdisk, raid10 keeps two copies (md's
/// default), the others one.
pub fn default_copies(org: Level, subdisks: u32) -> u32 {
    match org {
        Level::Mirror => subdisks,
        Level::Raid10 => 2,
        _ => 1,
    }
}
