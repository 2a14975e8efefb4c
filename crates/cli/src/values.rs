//! Value parsers that parse as the command line always has (aliases,
//! `split:256k`, the same errors) and also name the values, so that shell
//! completion (`platter completions`) and --help can offer them.

use clap::builder::{PossibleValue, TypedValueParser};
use platter_core::balance::ReadPolicy;
use platter_core::integrity::format::Algorithm;
use platter_core::level::{Level, ParityLayout};

/// Parses with `parse`; offers `names` (each of which `parse` takes).
#[derive(Clone)]
pub struct Named<T> {
    parse: fn(&str) -> Result<T, String>,
    names: fn() -> Vec<&'static str>,
}

impl<T: Clone + Send + Sync + 'static> TypedValueParser for Named<T> {
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        // A plain function's parser: clap's own error for a refused value.
        self.parse.parse_ref(cmd, arg, value)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new((self.names)().into_iter().map(PossibleValue::new)))
    }
}

/// `--level`: concat, stripe, mirror, raid10, raid5, raid6 (and md's
/// names raid0, raid1, linear).
pub fn level() -> Named<Level> {
    Named {
        parse: str::parse,
        names: || Level::ALL.iter().map(|l| l.name()).collect(),
    }
}

/// `--layout`, checked against the level later: md's parity layouts,
/// RAID-6's `-6` ones, and raid10's `near`.
pub fn layout() -> Named<String> {
    Named {
        parse: |s| Ok(s.to_string()),
        names: || {
            let parity = ParityLayout::ALL.iter().chain(&ParityLayout::RAID6_ONLY);
            parity.map(|l| l.name()).chain(["near"]).collect()
        },
    }
}

/// `--checksums`: none or an algorithm, parsed by `parse` (create's).
pub fn checksums<T>(parse: fn(&str) -> Result<T, String>) -> Named<T> {
    Named {
        parse,
        names: || vec!["none", Algorithm::Crc32c.name(), Algorithm::Xxh3.name()],
    }
}

/// `--read-policy`: the policies that need no argument (`prefer:SLOT`
/// needs a slot, which only the volume knows).
pub fn read_policy() -> Named<ReadPolicy> {
    Named {
        parse: str::parse,
        names: || vec!["auto", "round-robin", "split", "load", "proximity"],
    }
}

/// `read-policy POLICY`, passed on to the server as given.
pub fn read_policy_text() -> Named<String> {
    Named {
        parse: |s| Ok(s.to_string()),
        names: read_policy().names,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value offered is one the parser takes.
    fn offered_values_parse<T: Clone + Send + Sync + 'static>(p: &Named<T>) {
        let names = (p.names)();
        assert!(!names.is_empty());
        for name in names {
            assert!((p.parse)(name).is_ok(), "{name} is offered but refused");
        }
    }

    #[test]
    fn every_offered_value_parses() {
        offered_values_parse(&level());
        offered_values_parse(&read_policy());
        offered_values_parse(&Named {
            parse: |s| s.parse::<ParityLayout>().map(|_| ()),
            names: || ParityLayout::ALL.iter().map(|l| l.name()).collect(),
        });
        offered_values_parse(&checksums(|s| match s {
            "none" => Ok(()),
            other => Algorithm::parse(other).map(|_| ()).ok_or_else(String::new),
        }));
        assert_eq!((level().names)().len(), 6);
        assert!((layout().names)().contains(&"left-symmetric-6"));
    }
}
