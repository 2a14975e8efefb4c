//! A news spool and its readers (the workload behind vinum's stripe-size
//! advice): `dirs` newsgroups (390) of `per_dir` articles (100) each,
//! articles of 930, 3030 or 6102 bytes (equally likely), posted in random
//! group order and placed by [`FsModel`]; `readers` concurrent readers
//! (30) each read `files` articles (1000). A reader picks a random group
//! and reads a run of up to `run` (10) consecutive articles of it from a
//! random one, then picks another group. Each article is one read of its
//! allocated bytes (fragments); directories and inodes are not read.

use super::fs::FsModel;
use super::{Generator, Next, Op, Params};
use crate::rng::Rng;
use std::fmt;

pub const ARTICLE_BYTES: [u64; 3] = [930, 3030, 6102];

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct News {
    pub readers: u32,
    pub files_per_reader: u64,
    pub dirs: u64,
    pub per_dir: u64,
    pub run: u64,
}

impl Default for News {
    fn default() -> Self {
        News {
            readers: 30,
            files_per_reader: 1000,
            dirs: 390,
            per_dir: 100,
            run: 10,
        }
    }
}

impl News {
    pub fn from_params(p: &mut Params) -> Result<News, String> {
        let d = News::default();
        let n = News {
            readers: p.num("readers", u64::from(d.readers))? as u32,
            files_per_reader: p.num("files", d.files_per_reader)?,
            dirs: p.num("dirs", d.dirs)?,
            per_dir: p.num("per-dir", d.per_dir)?,
            run: p.num("run", d.run)?,
        };
        if n.readers == 0 || n.dirs == 0 || n.per_dir == 0 || n.run == 0 {
            return Err("news: readers, dirs, per-dir and run at least 1".into());
        }
        Ok(n)
    }

    pub fn generator(&self, volume_bytes: u64, mut rng: Rng) -> NewsGen {
        let mut fs = FsModel::new(volume_bytes);
        let mut articles: Vec<Vec<(u64, u64)>> = vec![Vec::new(); self.dirs as usize];
        // Posting order: every group gets its articles, interleaved.
        let mut order: Vec<u64> = (0..self.dirs * self.per_dir)
            .map(|i| i % self.dirs)
            .collect();
        for i in (1..order.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            order.swap(i, j);
        }
        for d in order {
            let size = *rng.pick(&ARTICLE_BYTES);
            articles[d as usize].push(fs.create(d, size));
        }
        NewsGen {
            articles,
            readers: (0..self.readers)
                .map(|_| Reader {
                    left: self.files_per_reader,
                    dir: 0,
                    at: 0,
                    run_left: 0,
                })
                .collect(),
            run: self.run,
            rng,
        }
    }
}

impl fmt::Display for News {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "news readers={} files={} dirs={} per-dir={} run={}",
            self.readers, self.files_per_reader, self.dirs, self.per_dir, self.run
        )
    }
}

struct Reader {
    left: u64,
    dir: usize,
    at: usize,
    run_left: u64,
}

pub struct NewsGen {
    articles: Vec<Vec<(u64, u64)>>,
    readers: Vec<Reader>,
    run: u64,
    rng: Rng,
}

impl Generator for NewsGen {
    fn processes(&self) -> u32 {
        self.readers.len() as u32
    }

    fn next(&mut self, p: u32, _now_ns: u64) -> Next {
        let r = &mut self.readers[p as usize];
        if r.left == 0 {
            return Next::Done;
        }
        r.left -= 1;
        if r.run_left == 0 || r.at >= self.articles[r.dir].len() {
            r.dir = self.rng.below(self.articles.len() as u64) as usize;
            r.at = self.rng.below(self.articles[r.dir].len() as u64) as usize;
            r.run_left = self.run;
        }
        let (off, len) = self.articles[r.dir][r.at];
        r.at += 1;
        r.run_left -= 1;
        Next::Op(Op::read(off, len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_read_their_share_of_articles() {
        let n = News {
            readers: 3,
            files_per_reader: 50,
            dirs: 39,
            per_dir: 10,
            run: 5,
        };
        let mut g = n.generator(1 << 30, Rng::new(1));
        for p in 0..3 {
            let mut count = 0;
            while let Next::Op(o) = g.next(p, 0) {
                assert!([1024, 3072, 6144].contains(&o.len_bytes), "{o:?}");
                count += 1;
            }
            assert_eq!(count, 50);
        }
    }
}
