//! Object layout: references, headers, and sizes.
//!
//! A reference is a 32-bit offset, in 8-byte words, from the heap base; 0 is
//! null, and the first object starts at word [`HEAP_START_WORDS`]. Every object
//! starts with an 8-byte header of two 32-bit words:
//!
//! | kind   | word 0 (tag)                                   | word 1           |
//! |--------|------------------------------------------------|------------------|
//! | object | class id (`< 2^31`)                            | size in bytes    |
//! | array  | `1<<31 \| (dims-1)<<27 \| elem kind<<24 \| class` | length           |
//! | filler | `0xFFFF_FFFF`                                  | size in bytes    |
//!
//! Object fields follow the header, superclass fields first, each aligned to
//! its size (4 bytes for `i32 f32 ref`, 8 for `i64 f64`). Array elements start
//! at byte 8. Every object's size is a multiple of 8, so the heap parses from
//! its start to its top, object by object.

use offload_ir::{ClassId, Elem, Kind, Type};

/// A heap reference (word offset from the heap base; 0 is null).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, Default, PartialOrd, Ord)]
pub struct Ref(pub u32);

impl Ref {
    /// The null reference.
    pub const NULL: Ref = Ref(0);
    /// Whether this is null.
    pub fn is_null(self) -> bool {
        self.0 == 0
    }
    /// Byte offset of the object's header.
    pub fn byte_offset(self) -> usize {
        self.0 as usize * 8
    }
}

/// Size of an object header.
pub const HEADER_BYTES: u32 = 8;
/// Words at the heap's start that hold no object (so that no object is null).
/// They stay zero and nothing writes them: null's "header" reads as tag 0,
/// length 0, which compiled code relies on to check an array access for
/// null and bounds with one compare (every index is out of bounds of null).
pub const HEAP_START_WORDS: u32 = 2;
/// Tag of filler objects.
pub const FILLER_TAG: u32 = 0xFFFF_FFFF;
const ARRAY_BIT: u32 = 1 << 31;
/// The largest class id a header can name inside an array tag.
pub const MAX_ARRAY_CLASS: u32 = (1 << 24) - 1;

/// A decoded header.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Header {
    /// An instance of a class (global class id), `size` bytes in all.
    Object {
        /// Global class id.
        class: u32,
        /// Size in bytes, header included.
        size: u32,
    },
    /// An array.
    Array {
        /// Innermost element; classes are global ids.
        elem: Elem,
        /// Dimensions, at least 1.
        dims: u8,
        /// Number of elements.
        len: u32,
    },
    /// Unused space made parseable.
    Filler {
        /// Size in bytes, header included.
        size: u32,
    },
}

/// `object of class 3 (24 bytes)`, `array of i32 (1 dims, 10 elements)`,
/// `filler (16 bytes)`; classes by global id.
impl std::fmt::Display for Header {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Header::Object { class, size } => write!(f, "object of class {class} ({size} bytes)"),
            Header::Array { elem, dims, len } => {
                let e = match elem {
                    Elem::I32 => "i32".to_string(),
                    Elem::I64 => "i64".to_string(),
                    Elem::F32 => "f32".to_string(),
                    Elem::F64 => "f64".to_string(),
                    Elem::Ref => "ref".to_string(),
                    Elem::Class(c) => format!("class {}", c.0),
                };
                write!(f, "array of {e} ({dims} dims, {len} elements)")
            }
            Header::Filler { size } => write!(f, "filler ({size} bytes)"),
        }
    }
}

fn elem_code(e: Elem) -> (u32, u32) {
    match e {
        Elem::I32 => (0, 0),
        Elem::I64 => (1, 0),
        Elem::F32 => (2, 0),
        Elem::F64 => (3, 0),
        Elem::Ref => (4, 0),
        Elem::Class(c) => (5, c.0),
    }
}

impl Header {
    /// Encode as the two header words, or `None` if a field does not fit.
    pub fn encode(self) -> Option<(u32, u32)> {
        match self {
            Header::Object { class, size } => (class < ARRAY_BIT).then_some((class, size)),
            Header::Array { elem, dims, len } => {
                let (kind, class) = elem_code(elem);
                if !(1..=8).contains(&dims) || class > MAX_ARRAY_CLASS {
                    return None;
                }
                Some((
                    ARRAY_BIT | (u32::from(dims) - 1) << 27 | kind << 24 | class,
                    len,
                ))
            }
            Header::Filler { size } => Some((FILLER_TAG, size)),
        }
    }

    /// Decode two header words, or `None` if they are not a valid header.
    pub fn decode(tag: u32, word1: u32) -> Option<Header> {
        if tag == FILLER_TAG {
            return Some(Header::Filler { size: word1 });
        }
        if tag & ARRAY_BIT == 0 {
            return Some(Header::Object {
                class: tag,
                size: word1,
            });
        }
        let dims = ((tag >> 27) & 7) as u8 + 1;
        let class = tag & MAX_ARRAY_CLASS;
        let elem = match (tag >> 24) & 7 {
            0 => Elem::I32,
            1 => Elem::I64,
            2 => Elem::F32,
            3 => Elem::F64,
            4 => Elem::Ref,
            5 => Elem::Class(ClassId(class)),
            _ => return None,
        };
        if !matches!(elem, Elem::Class(_)) && class != 0 {
            return None;
        }
        Some(Header::Array {
            elem,
            dims,
            len: word1,
        })
    }

    /// Total size in bytes, or `None` for an array too large to exist.
    pub fn size(self) -> Option<u64> {
        match self {
            Header::Object { size, .. } | Header::Filler { size } => Some(u64::from(size)),
            Header::Array { elem, dims, len } => array_bytes(array_elem_kind(elem, dims), len),
        }
    }
}

/// Byte size of a value of this kind in a field or array element.
pub fn kind_size(k: Kind) -> u32 {
    match k {
        Kind::I32 | Kind::F32 | Kind::Ref => 4,
        Kind::I64 | Kind::F64 => 8,
    }
}

/// The kind of an array's elements.
pub fn array_elem_kind(elem: Elem, dims: u8) -> Kind {
    if dims > 1 {
        Kind::Ref
    } else {
        elem.to_type().kind()
    }
}

/// Bytes of an array of `len` elements of `kind`, header included, rounded to 8.
pub fn array_bytes(kind: Kind, len: u32) -> Option<u64> {
    let raw = u64::from(HEADER_BYTES) + u64::from(len) * u64::from(kind_size(kind));
    let bytes = raw.div_ceil(8) * 8;
    (bytes <= u64::from(u32::MAX) - 7).then_some(bytes)
}

/// The header of an array of type `t` (which must be an array type).
pub fn array_header(t: Type, len: u32) -> Option<Header> {
    match t {
        Type::Array(elem, dims) => Some(Header::Array { elem, dims, len }),
        _ => None,
    }
}

/// Round a byte size up to whole words.
pub fn words(bytes: u64) -> u64 {
    bytes.div_ceil(8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        let hs = [
            Header::Object { class: 5, size: 24 },
            Header::Array {
                elem: Elem::F32,
                dims: 1,
                len: 10,
            },
            Header::Array {
                elem: Elem::Class(ClassId(77)),
                dims: 3,
                len: 0,
            },
            Header::Array {
                elem: Elem::Ref,
                dims: 8,
                len: u32::MAX,
            },
            Header::Filler { size: 8 },
        ];
        for h in hs {
            let (a, b) = h.encode().unwrap();
            assert_eq!(Header::decode(a, b), Some(h));
        }
        assert_eq!(
            Header::Object {
                class: 1 << 31,
                size: 8
            }
            .encode(),
            None
        );
        assert_eq!(array_bytes(Kind::I32, 3), Some(24));
        assert_eq!(array_bytes(Kind::F64, 0), Some(8));
        assert_eq!(array_bytes(Kind::F64, u32::MAX), None);
    }
}
