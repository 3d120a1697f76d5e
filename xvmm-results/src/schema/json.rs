//! The layout reports are written in: serde_json's pretty form, except that
//! an array of numbers stays on one line (`[1, 2, 3]`). A histogram is then
//! one line instead of twenty, and a sample (an array of stamps, see
//! `sample_format`) one line instead of six, which keeps `--raw` reports of
//! every round within the VMM's results slot.

use serde::Serialize;
use serde_json::ser::{CompactFormatter, Formatter};
use std::io::{self, Write};

/// Serialises `value` in the report layout.
pub fn to_string<T: Serialize>(value: &T) -> String {
    let mut out = Vec::with_capacity(4096);
    let mut ser = serde_json::Serializer::with_formatter(&mut out, Layout::default());
    // Plain data with string keys: serialising cannot fail.
    if value.serialize(&mut ser).is_err() {
        return String::new();
    }
    String::from_utf8(out).unwrap_or_default()
}

/// Pretty objects, arrays pretty unless their first element is a number,
/// a bool or null.
#[derive(Default)]
struct Layout {
    indent: usize,
    /// Whether the object being written has a member yet.
    has_value: bool,
    /// Per open array: whether it is written one element a line.
    arrays: Vec<bool>,
    /// An array element is about to start: (first element?).
    pending: Option<bool>,
}

const INDENT: &[u8] = b"  ";

impl Layout {
    fn newline<W: ?Sized + Write>(&self, w: &mut W) -> io::Result<()> {
        w.write_all(b"\n")?;
        for _ in 0..self.indent {
            w.write_all(INDENT)?;
        }
        Ok(())
    }

    /// Writes what goes before an array element, once its kind is known.
    fn element<W: ?Sized + Write>(&mut self, w: &mut W, scalar: bool) -> io::Result<()> {
        let Some(first) = self.pending.take() else {
            return Ok(());
        };
        if first {
            if let Some(pretty) = self.arrays.last_mut() {
                *pretty = !scalar;
            }
        }
        let pretty = self.arrays.last().copied().unwrap_or(false);
        if !first {
            w.write_all(if pretty { b"," } else { b", " })?;
        }
        if pretty {
            self.newline(w)?;
        }
        Ok(())
    }
}

macro_rules! scalar {
    ($($name:ident: $t:ty),*) => {
        $(fn $name<W: ?Sized + Write>(&mut self, w: &mut W, v: $t) -> io::Result<()> {
            self.element(w, true)?;
            CompactFormatter.$name(w, v)
        })*
    };
}

impl Formatter for Layout {
    fn write_null<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.element(w, true)?;
        CompactFormatter.write_null(w)
    }

    scalar!(write_bool: bool, write_i8: i8, write_i16: i16, write_i32: i32, write_i64: i64,
            write_u8: u8, write_u16: u16, write_u32: u32, write_u64: u64, write_f32: f32,
            write_f64: f64, write_number_str: &str);

    fn begin_string<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.element(w, false)?;
        CompactFormatter.begin_string(w)
    }

    fn begin_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.element(w, false)?;
        self.arrays.push(false);
        self.indent += 1;
        w.write_all(b"[")
    }

    fn end_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.indent -= 1;
        if self.arrays.pop() == Some(true) {
            self.newline(w)?;
        }
        w.write_all(b"]")
    }

    fn begin_array_value<W: ?Sized + Write>(&mut self, _w: &mut W, first: bool) -> io::Result<()> {
        self.pending = Some(first);
        Ok(())
    }

    fn end_array_value<W: ?Sized + Write>(&mut self, _w: &mut W) -> io::Result<()> {
        Ok(())
    }

    fn begin_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.element(w, false)?;
        self.indent += 1;
        self.has_value = false;
        w.write_all(b"{")
    }

    fn end_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.indent -= 1;
        if self.has_value {
            self.newline(w)?;
        }
        w.write_all(b"}")
    }

    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if !first {
            w.write_all(b",")?;
        }
        self.newline(w)
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }

    fn end_object_value<W: ?Sized + Write>(&mut self, _w: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_inline_objects_and_strings_pretty() {
        let v = json!({
            "counts": [1, 2, 3],
            "empty": [],
            "notes": ["a", "b"],
            "rows": [{"x": 1}, {}],
            "samples": [[1, 2], [3, null]],
            "o": {}
        });
        let text = to_string(&v);
        let expected = r#"{
  "counts": [1, 2, 3],
  "empty": [],
  "notes": [
    "a",
    "b"
  ],
  "o": {},
  "rows": [
    {
      "x": 1
    },
    {}
  ],
  "samples": [
    [1, 2],
    [3, null]
  ]
}"#;
        assert_eq!(text, expected);
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, v);
    }
}
