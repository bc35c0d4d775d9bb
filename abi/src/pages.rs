//! Pages by class: how compiled code finds an object's class from its
//! reference alone (BiBoP, "big bag of pages"; COAL in seed 003).
//!
//! The heap is cut into pages of [`PAGE_WORDS`] words, and a table with one
//! 32-bit tag per page (`offload_heap::pages`) says what the objects that
//! *start* in the page are:
//!
//! | tag                 | every object starting in the page is |
//! |---------------------|--------------------------------------|
//! | `c < 2^31`          | an instance of class `c` (global id) |
//! | [`ARRAYS`]          | an array                             |
//! | [`MIXED`]           | anything (read its header)           |
//!
//! A tag with its top bit set names no class, so the whole rule compiled
//! code needs is: `tag = table[r >> PAGE_SHIFT]`; if `tag` is negative as an
//! `i32`, the class is in the header. Fillers may start in any page.

/// Words per page (2 KiB).
pub const PAGE_WORDS: u32 = 1 << PAGE_SHIFT;

/// Bytes per page.
pub const PAGE_BYTES: usize = (PAGE_WORDS as usize) * 8;

/// A reference (a word offset) shifted right by this is its page's index.
pub const PAGE_SHIFT: u32 = 8;

/// The tag of a page that holds arrays only.
pub const ARRAYS: u32 = 1 << 31;

/// The tag of a page that may hold objects of several classes and arrays.
pub const MIXED: u32 = u32::MAX;

/// Bytes per tag in the table.
pub const TAG_BYTES: u32 = 4;

/// Whether a tag names the class of every object in its page.
pub const fn names_class(tag: u32) -> bool {
    tag & ARRAYS == 0
}

/// The page of the object at word `r`.
pub const fn page_of(r: u32) -> usize {
    (r >> PAGE_SHIFT) as usize
}
