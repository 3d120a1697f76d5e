//! How a [`Sample`] is written: a compact array, one sample a line in the
//! report, since `--raw` keeps every sample of every round (a 10k-sample,
//! 3-round xperf run holds 90k of them and must fit the VMM's 16 MiB results
//! slot).
//!
//! `[u2k_u, u2k_k, k2u_k, k2u_u]`, or with what the producer knows about the
//! sample's surroundings `[u2k_u, u2k_k, k2u_k, k2u_u, cpu, interrupts]`
//! (`null` where unknown). Reports written before this form held an object
//! `{"u2k_u": .., "u2k_k": .., "k2u_k": .., "k2u_u": ..}` per sample; both
//! forms are read.

use crate::Sample;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeTuple, Serializer};
use serde::{Deserialize, Serialize};

impl Serialize for Sample {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let extra = self.cpu.is_some() || self.interrupts.is_some();
        let mut t = serializer.serialize_tuple(if extra { 6 } else { 4 })?;
        for v in [self.u2k_u, self.u2k_k, self.k2u_k, self.k2u_u] {
            t.serialize_element(&v)?;
        }
        if extra {
            t.serialize_element(&self.cpu)?;
            t.serialize_element(&self.interrupts)?;
        }
        t.end()
    }
}

struct SampleVisitor;

impl<'de> Visitor<'de> for SampleVisitor {
    type Value = Sample;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a sample: [u2k_u, u2k_k, k2u_k, k2u_u(, cpu, interrupts)] or an object of the four stamps")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Sample, A::Error> {
        let mut stamp = |i: usize| -> Result<u64, A::Error> {
            seq.next_element()?
                .ok_or_else(|| de::Error::invalid_length(i, &self))
        };
        let mut s = Sample {
            u2k_u: stamp(0)?,
            u2k_k: stamp(1)?,
            k2u_k: stamp(2)?,
            k2u_u: stamp(3)?,
            ..Default::default()
        };
        if let Some(cpu) = seq.next_element::<Option<u32>>()? {
            s.cpu = cpu;
            s.interrupts = seq
                .next_element::<Option<u32>>()?
                .ok_or_else(|| de::Error::invalid_length(5, &self))?;
        }
        if seq.next_element::<de::IgnoredAny>()?.is_some() {
            return Err(de::Error::invalid_length(7, &self));
        }
        Ok(s)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Sample, A::Error> {
        let mut stamps: [Option<u64>; 4] = [None; 4];
        const NAMES: [&str; 4] = ["u2k_u", "u2k_k", "k2u_k", "k2u_u"];
        while let Some(key) = map.next_key::<String>()? {
            match NAMES.iter().position(|n| *n == key) {
                Some(i) if stamps[i].is_some() => {
                    return Err(de::Error::duplicate_field(NAMES[i]));
                }
                Some(i) => stamps[i] = Some(map.next_value()?),
                None => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        let get = |i: usize| stamps[i].ok_or_else(|| de::Error::missing_field(NAMES[i]));
        Ok(Sample {
            u2k_u: get(0)?,
            u2k_k: get(1)?,
            k2u_k: get(2)?,
            k2u_u: get(3)?,
            ..Default::default()
        })
    }
}

impl<'de> Deserialize<'de> for Sample {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Sample, D::Error> {
        deserializer.deserialize_any(SampleVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s() -> Sample {
        Sample {
            u2k_u: 1,
            u2k_k: 2,
            k2u_k: 3,
            k2u_u: 4,
            ..Default::default()
        }
    }

    #[test]
    fn plain_samples_are_four_numbers() {
        assert_eq!(serde_json::to_string(&s()).unwrap(), "[1,2,3,4]");
        let back: Sample = serde_json::from_str("[1,2,3,4]").unwrap();
        assert_eq!(back, s());
    }

    #[test]
    fn cpu_and_interrupts_follow_when_known() {
        let mut x = s();
        x.cpu = Some(3);
        assert_eq!(serde_json::to_string(&x).unwrap(), "[1,2,3,4,3,null]");
        x.interrupts = Some(1);
        let text = serde_json::to_string(&x).unwrap();
        assert_eq!(serde_json::from_str::<Sample>(&text).unwrap(), x);
    }

    #[test]
    fn the_old_object_form_still_reads() {
        let old = r#"{"u2k_u": 1, "u2k_k": 2, "k2u_k": 3, "k2u_u": 4}"#;
        assert_eq!(serde_json::from_str::<Sample>(old).unwrap(), s());
        assert!(serde_json::from_str::<Sample>(r#"{"u2k_u": 1}"#).is_err());
    }

    #[test]
    fn malformed_samples_are_errors() {
        for bad in [
            "[1,2,3]",
            "[1,2,3,4,5]",
            "[1,2,3,4,5,6,7]",
            "[-1,2,3,4]",
            "\"x\"",
            "[]",
        ] {
            assert!(serde_json::from_str::<Sample>(bad).is_err(), "{bad}");
        }
    }
}
