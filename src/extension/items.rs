//! Items of any type, compared and hashed the way PostgreSQL compares them.
//!
//! Equality comes from the type's default hash operator class (through the type cache),
//! with the aggregate's input collation: 'A' and 'a' are one item under a case-insensitive
//! nondeterministic collation, exactly as in a `GROUP BY`. For the common types whose
//! equality is plain bit or byte equality, the comparison and the hash run in Rust, with
//! no function-manager call per row (the hot path of every selection aggregate).

use super::spellings::{is_deterministic, spelling, Spelling, EQUAL_BITS};
use crate::error::Error;
use pgrx::pg_sys::{self, Datum, Oid};
use std::ffi::{c_char, CStr};
use std::hash::BuildHasher;

/// How the items of a type are compared and hashed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Comparison {
    /// By value, equal exactly when their bits are (integers, oid, date, time, timestamps,
    /// bool, "char", enums): the low `length` bytes of the datum.
    Bits { length: usize },
    /// Varlenas equal exactly when their contents are: text and varchar under a
    /// deterministic collation (texteq compares bytes there; hashtext hashes them).
    Bytes,
    /// By reference, fixed length, equal exactly when their bytes are (uuid).
    FixedBytes { length: usize },
    /// The type's default hash operator class, through the function manager.
    Operator,
}

/// The hash of the Rust comparisons: fixed seed, so that every process (parallel workers,
/// the leader) and every run agrees, as the serialized state and the limited-domain
/// tie-break need.
#[inline]
pub(super) fn hash_bytes(bytes: &[u8]) -> u32 {
    const SEED: u64 = 0x7067_5f65_7870_6d65;
    (foldhash::fast::FixedState::with_seed(SEED).hash_one(bytes) >> 32) as u32
}

/// The contents of a varlena item, detoasted only when compressed or stored out of line
/// (a short inline value is read where it lies).
///
/// # Safety
/// `item` must be a valid, non-NULL varlena datum that outlives the returned slice.
#[inline(always)]
unsafe fn varlena_contents<'a>(item: Datum) -> &'a [u8] {
    // SAFETY: a valid varlena (the caller's contract) is read where it lies when inline,
    // else detoasted into a copy that lives as long as the current memory context.
    unsafe {
        let mut pointer = item.cast_mut_ptr::<pg_sys::varlena>();
        let inline = pgrx::varatt_is_4b_u(pointer)
            || (pgrx::varatt_is_1b(pointer) && !pgrx::varatt_is_1b_e(pointer));
        if !inline {
            pointer = detoasted(pointer);
        }
        std::slice::from_raw_parts(
            pgrx::vardata_any(pointer) as *const u8,
            pgrx::varsize_any_exhdr(pointer),
        )
    }
}

/// A compressed or out-of-line varlena's detoasted copy, in the current memory context.
/// Out of line: PostgreSQL's error handling around the call (a setjmp) would otherwise
/// set up its frame in every row's call.
///
/// # Safety
/// `pointer` must be a valid varlena.
#[cold]
#[inline(never)]
unsafe fn detoasted(pointer: *mut pg_sys::varlena) -> *mut pg_sys::varlena {
    // SAFETY: as the caller guarantees.
    unsafe { pg_sys::pg_detoast_datum_packed(pointer) }
}

/// An item as it is hashed and compared, made only by [`ItemType::key`] (so that a key
/// always holds what its type's comparison reads, and `hash` can be safe).
#[derive(Debug, Clone, Copy)]
pub struct ItemKey<'a>(Key<'a>);

#[derive(Debug, Clone, Copy)]
enum Key<'a> {
    /// The bits of a by-value item that count.
    Bits(u64),
    /// The contents of a varlena, or the bytes of a fixed-length item.
    Bytes(&'a [u8]),
    /// An item compared by the type's own functions.
    Datum(Datum),
}

/// How many bytes of a key a stored item keeps beside its datum: 15 makes a stored item
/// 24 bytes and a table entry 32 (two a cache line). Longer keys (a uuid's 16 bytes
/// among them) are compared where the copy lies.
const INLINE: usize = 15;

/// A stored item (a datum in the aggregate's memory) and, when its key is at most
/// [`INLINE`] bytes, those bytes beside it: a probe that finds its slot then compares
/// there, rather than following the datum elsewhere in memory (a cache miss a row once
/// the items outgrow the cache, as 10^5 of them do).
#[derive(Debug, Clone, Copy)]
pub struct StoredItem {
    pub datum: Datum,
    /// The key's length when it is inline here, else `u8::MAX`.
    inline_length: u8,
    inline: [u8; INLINE],
}

/// What an empty slot of a score table holds: a null datum, never compared (an empty
/// slot's tag matches no item).
impl Default for StoredItem {
    fn default() -> Self {
        Self {
            datum: Datum::from(0usize),
            inline_length: u8::MAX,
            inline: [0; INLINE],
        }
    }
}

/// Byte equality; short slices (most items' keys) are compared a word at a time rather
/// than through a call to libc's memcmp, which cost more than the comparison.
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let length = a.len();
    if length != b.len() {
        return false;
    }
    let word = |s: &[u8], at: usize| u64::from_ne_bytes(s[at..at + 8].try_into().unwrap());
    let half = |s: &[u8], at: usize| u32::from_ne_bytes(s[at..at + 4].try_into().unwrap());
    match length {
        // Two overlapping words (or halves) cover every byte.
        8..=16 => word(a, 0) == word(b, 0) && word(a, length - 8) == word(b, length - 8),
        4..=7 => half(a, 0) == half(b, 0) && half(a, length - 4) == half(b, length - 4),
        _ => a == b,
    }
}

/// The longest item counted, in bytes: a rule of the aggregate, the same for every row
/// and every plan. One item of nearly 1 GB (12 MB compressed on disk) made a parallel
/// worker's state too large for a bytea, an ERROR that one row decided in a parallel plan
/// and not in a serial one, and was copied three times in a serial one (red team,
/// 2026-11-27).
pub const MAX_ITEM_BYTES: usize = 1 << 20;

/// How to hash, compare, copy and serialize the items of one type.
#[derive(Clone, Copy)]
pub struct ItemType {
    pub type_oid: Oid,
    pub collation: Oid,
    length: i16,
    by_value: bool,
    alignment: c_char,
    comparison: Comparison,
    /// How its equal items are spelled: an answer is spelled canonically where it can be
    /// (spellings.rs).
    pub spelling: Spelling,
    /// Owned by the type cache, which lives as long as the backend.
    hash: *mut pg_sys::FmgrInfo,
    equal: *mut pg_sys::FmgrInfo,
}

/// The name of a type, as `format_type_be` prints it.
pub fn type_name(type_oid: Oid) -> String {
    // SAFETY: format_type_be returns a palloc'd C string for any oid.
    unsafe { CStr::from_ptr(pg_sys::format_type_be(type_oid)) }
        .to_string_lossy()
        .into_owned()
}

impl ItemType {
    /// Looks up the type's hash and equality functions; a type without a default hash
    /// operator class (point, xml, ...) cannot be an item.
    pub fn lookup(type_oid: Oid, collation: Oid) -> Result<Self, Error> {
        // SAFETY: lookup_type_cache returns an entry of the backend's type cache, which
        // is never freed; its function infos live as long as the backend.
        unsafe {
            let flags = pg_sys::TYPECACHE_HASH_PROC_FINFO | pg_sys::TYPECACHE_EQ_OPR_FINFO;
            let entry = pg_sys::lookup_type_cache(type_oid, flags as i32);
            if (*entry).hash_proc_finfo.fn_oid == pg_sys::InvalidOid
                || (*entry).eq_opr_finfo.fn_oid == pg_sys::InvalidOid
            {
                return Err(Error::NoHashFunction {
                    type_name: type_name(type_oid),
                });
            }
            let length = (*entry).typlen;
            let comparison = match type_oid {
                _ if EQUAL_BITS.contains(&type_oid) => Comparison::Bits {
                    length: length as usize,
                },
                _ if (*entry).typtype as u8 == pg_sys::TYPTYPE_ENUM => Comparison::Bits {
                    length: length as usize,
                },
                pg_sys::TEXTOID | pg_sys::VARCHAROID if is_deterministic(collation) => {
                    Comparison::Bytes
                }
                pg_sys::UUIDOID => Comparison::FixedBytes { length: 16 },
                _ => Comparison::Operator,
            };
            Ok(Self {
                type_oid,
                collation,
                length,
                by_value: (*entry).typbyval,
                alignment: (*entry).typalign,
                comparison,
                spelling: spelling(type_oid, collation),
                hash: &mut (*entry).hash_proc_finfo,
                equal: &mut (*entry).eq_opr_finfo,
            })
        }
    }

    /// Whether a row's item is longer than [`MAX_ITEM_BYTES`] (a varlena's size once
    /// detoasted, read from its header without detoasting it): such a row is skipped, as
    /// a NULL item is.
    ///
    /// # Safety
    /// `item` must be a valid, non-NULL datum of this type.
    #[inline]
    pub unsafe fn too_long(&self, item: Datum) -> bool {
        // SAFETY: a valid varlena of this type, as the caller guarantees.
        self.length == -1 && unsafe { pg_sys::toast_raw_datum_size(item) } > MAX_ITEM_BYTES
    }

    /// The low `length` bytes of a by-value datum (the rest need not be defined).
    #[inline]
    fn bits(item: Datum, length: usize) -> u64 {
        let value = item.value() as u64;
        if length >= 8 {
            value
        } else {
            value & ((1u64 << (8 * length)) - 1)
        }
    }

    /// [`ItemType::key`] when it needs no PostgreSQL call: a by-value item, a uuid, or a
    /// text or varchar item (deterministic collation) inline in its row; None for an item
    /// compressed or stored out of line (detoasted by PostgreSQL) or compared by its
    /// type's functions. Neither hashing nor comparing such a key with a stored item
    /// calls PostgreSQL (stored items are detoasted copies): rows counted outside pgrx's
    /// guard.
    ///
    /// # Safety
    /// As for [`ItemType::key`].
    #[inline(always)]
    pub unsafe fn key_in_place<'a>(&self, item: Datum) -> Option<ItemKey<'a>> {
        match self.comparison {
            // SAFETY: a valid varlena of this type (the caller's contract), read where it
            // lies when its header says it is inline and uncompressed; headers are read
            // by pgrx's ports of PostgreSQL's macros, not by PostgreSQL.
            Comparison::Bytes => unsafe {
                let pointer = item.cast_mut_ptr::<pg_sys::varlena>();
                let inline = pgrx::varatt_is_4b_u(pointer)
                    || (pgrx::varatt_is_1b(pointer) && !pgrx::varatt_is_1b_e(pointer));
                inline.then(|| {
                    ItemKey(Key::Bytes(std::slice::from_raw_parts(
                        pgrx::vardata_any(pointer) as *const u8,
                        pgrx::varsize_any_exhdr(pointer),
                    )))
                })
            },
            Comparison::Operator => None,
            Comparison::Bits { .. } | Comparison::FixedBytes { .. } => {
                // SAFETY: as the caller guarantees: bits or fixed bytes, read where they lie.
                Some(unsafe { self.key(item) })
            }
        }
    }

    /// The item as its hash and its comparisons read it, read once for a row (a varlena's
    /// header parsed, and detoasted if need be, once rather than once a probe).
    ///
    /// # Safety
    /// `item` must be a valid, non-NULL datum of this type that outlives the key, and so
    /// must the current memory context (a compressed or out-of-line item's key points
    /// into its detoasted copy there).
    #[inline]
    pub unsafe fn key<'a>(&self, item: Datum) -> ItemKey<'a> {
        // SAFETY: a valid datum of this type (the caller's contract), read as the type's
        // comparison says: its bits, its varlena contents or its fixed bytes.
        ItemKey(unsafe {
            match self.comparison {
                Comparison::Bits { length } => Key::Bits(Self::bits(item, length)),
                Comparison::Bytes => Key::Bytes(varlena_contents(item)),
                Comparison::FixedBytes { length } => Key::Bytes(std::slice::from_raw_parts(
                    item.cast_mut_ptr::<u8>(),
                    length,
                )),
                Comparison::Operator => Key::Datum(item),
            }
        })
    }

    /// The item's hash, equal for items that [`ItemType::matches`] says are equal.
    ///
    /// # Safety
    /// `key` must come from this type's [`ItemType::key`] (a key of another type could
    /// hold a datum this type's hash function cannot read).
    // Always inlined: a row's key is then hashed by the code of its own kind alone (out of
    // line, hashing and matching took 15 % of dp_argmax's samples over 1,000 text items,
    // issue 22).
    #[inline(always)]
    pub unsafe fn hash(&self, key: ItemKey) -> u32 {
        match key.0 {
            Key::Bits(bits) => hash_bytes(&bits.to_ne_bytes()),
            Key::Bytes(bytes) => hash_bytes(bytes),
            // SAFETY: the key is this type's (the caller's contract), made by `key` from a
            // valid datum that outlives it; the type cache's function info lives as long
            // as the backend.
            Key::Datum(item) => unsafe {
                pg_sys::FunctionCall1Coll(self.hash, self.collation, item).value() as u32
            },
        }
    }

    /// `datum` (a copy that lives as long as the table) stored with `key`, the key of an
    /// item equal to it.
    #[inline]
    pub fn store(&self, datum: Datum, key: ItemKey) -> StoredItem {
        let mut stored = StoredItem {
            datum,
            inline_length: u8::MAX,
            inline: [0; INLINE],
        };
        if let Key::Bytes(bytes) = key.0 {
            if bytes.len() <= INLINE {
                stored.inline[..bytes.len()].copy_from_slice(bytes);
                stored.inline_length = bytes.len() as u8;
            }
        }
        stored
    }

    /// Whether a stored item and a row's item are one, as the type's default hash
    /// operator class says.
    ///
    /// # Safety
    /// `stored` must hold a valid, non-NULL datum of this type, and `key` be one of its
    /// keys.
    #[inline(always)] // as `hash`
    pub unsafe fn matches(&self, stored: &StoredItem, key: ItemKey) -> bool {
        if stored.inline_length != u8::MAX {
            return match key.0 {
                Key::Bytes(bytes) => {
                    same_bytes(&stored.inline[..stored.inline_length as usize], bytes)
                }
                _ => false,
            };
        }
        let stored = stored.datum;
        // SAFETY: as in `key`, for the stored item; `key` is this type's.
        unsafe {
            match key.0 {
                Key::Bits(bits) => bits == Self::bits(stored, self.bits_length()),
                Key::Bytes(bytes) => match self.comparison {
                    Comparison::FixedBytes { length } => same_bytes(
                        std::slice::from_raw_parts(stored.cast_mut_ptr::<u8>(), length),
                        bytes,
                    ),
                    _ => same_bytes(varlena_contents(stored), bytes),
                },
                Key::Datum(item) => {
                    pg_sys::FunctionCall2Coll(self.equal, self.collation, stored, item).value() != 0
                }
            }
        }
    }

    /// The number of bytes of a by-value item that count.
    #[inline]
    fn bits_length(&self) -> usize {
        match self.comparison {
            Comparison::Bits { length } => length,
            _ => std::mem::size_of::<Datum>(),
        }
    }

    /// The bytes of a by-reference item, detoasted (never a TOAST pointer or short header).
    ///
    /// # Safety
    /// `item` must be a valid, non-NULL datum of this type.
    unsafe fn image<'a>(&self, item: Datum) -> &'a [u8] {
        // SAFETY: a valid datum of this type is a varlena (length -1), a C string (-2) or
        // `length` bytes; a varlena is detoasted first.
        unsafe {
            let (pointer, length) = match self.length {
                -1 => {
                    let flat = pg_sys::pg_detoast_datum(item.cast_mut_ptr());
                    (flat as *const u8, pgrx::varsize_any(flat))
                }
                -2 => {
                    let text = item.cast_mut_ptr::<c_char>();
                    (
                        text as *const u8,
                        CStr::from_ptr(text).to_bytes_with_nul().len(),
                    )
                }
                n => (item.cast_mut_ptr::<u8>() as *const u8, n as usize),
            };
            std::slice::from_raw_parts(pointer, length)
        }
    }

    /// A copy of `item` in `memory`; a compressed or out-of-line item is detoasted in the
    /// current memory context (a row's, reset after it, in a transition), not in
    /// `memory`, so that only the copy stays there.
    ///
    /// # Safety
    /// `item` must be a valid, non-NULL datum of this type, `memory` a live context.
    pub unsafe fn copy_into(&self, item: Datum, memory: pg_sys::MemoryContext) -> Datum {
        if self.by_value {
            return item;
        }
        // SAFETY: as the caller guarantees.
        let image = unsafe { self.image(item) };
        // SAFETY: a live context (the caller's contract) for the time of the copy.
        unsafe { pgrx::PgMemoryContexts::For(memory).switch_to(|_| self.restore(image)) }
    }

    /// `item` as an answer releases it: spelled canonically when its type has a canonical
    /// spelling (numeric 1.00 as 1, in the current memory context; float -0 as 0), so that
    /// which of its spellings the rows held does not show (spellings.rs); else `item`.
    ///
    /// # Safety
    /// `item` must be a valid, non-NULL datum of this type.
    pub unsafe fn spelled(&self, item: Datum) -> Datum {
        match self.spelling {
            // SAFETY: as the caller guarantees.
            Spelling::Canonical(canonical) => unsafe { canonical.spell(item) },
            _ => item,
        }
    }

    /// A copy of `item` in the current memory context.
    ///
    /// # Safety
    /// `item` must be a valid, non-NULL datum of this type.
    pub unsafe fn copy(&self, item: Datum) -> Datum {
        if self.by_value {
            item
        } else {
            // SAFETY: as the caller guarantees.
            self.restore(unsafe { self.image(item) })
        }
    }

    /// Appends the item's bytes to `out` (for the serialized aggregate state).
    ///
    /// # Safety
    /// `item` must be a valid, non-NULL datum of this type.
    pub unsafe fn write_image(&self, item: Datum, out: &mut Vec<u8>) -> u32 {
        let start = out.len();
        if self.by_value {
            out.extend_from_slice(&item.value().to_ne_bytes());
        } else {
            // SAFETY: as the caller guarantees.
            out.extend_from_slice(unsafe { self.image(item) });
        }
        (out.len() - start) as u32
    }

    /// Whether `bytes` can be the image of a value of this type, as [`ItemType::image`]
    /// writes it: a fixed-length value has its length; a varlena is inline and
    /// uncompressed, with the length its header says (never a pointer to elsewhere); a C
    /// string ends at its one NUL.
    pub fn is_image(&self, bytes: &[u8]) -> bool {
        match self.length {
            _ if self.by_value => bytes.len() == std::mem::size_of::<usize>(),
            -1 => match bytes.first() {
                // A 1-byte header (low bit set): 0x01 alone marks an external pointer.
                Some(&first) if first & 0x01 == 0x01 => {
                    first != 0x01 && (first >> 1) as usize == bytes.len()
                }
                // A 4-byte header: low bits 00 uncompressed (10 is compressed).
                Some(&first) if first & 0x03 == 0x00 && bytes.len() >= 4 => {
                    let header = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
                    (header >> 2) as usize == bytes.len()
                }
                _ => false,
            },
            -2 => bytes.last() == Some(&0) && !bytes[..bytes.len() - 1].contains(&0),
            length => length > 0 && bytes.len() == length as usize,
        }
    }

    /// An item rebuilt from the bytes [`ItemType::write_image`] wrote, in the current
    /// memory context.
    pub fn restore(&self, bytes: &[u8]) -> Datum {
        if self.by_value {
            let mut word = [0u8; std::mem::size_of::<usize>()];
            word.copy_from_slice(bytes);
            Datum::from(usize::from_ne_bytes(word))
        } else {
            // SAFETY: palloc returns a block of the size asked for, which nothing else
            // uses; the bytes are copied into it whole.
            unsafe {
                let target = pg_sys::palloc(bytes.len()) as *mut u8;
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), target, bytes.len());
                Datum::from(target)
            }
        }
    }

    /// The non-NULL elements of an array of this type.
    ///
    /// # Safety
    /// `array` must be a valid, non-NULL array whose element type is this type.
    pub unsafe fn array_elements(&self, array: Datum) -> Vec<Datum> {
        // SAFETY: as the caller guarantees, with this type's own layout.
        unsafe {
            array_elements(
                array,
                self.type_oid,
                self.length,
                self.by_value,
                self.alignment,
            )
        }
        .into_iter()
        .flatten()
        .collect()
    }

    /// A one-dimensional array of `items`, in the current memory context.
    ///
    /// # Safety
    /// Every item must be a valid, non-NULL datum of this type.
    pub unsafe fn array(&self, items: &[Datum]) -> Datum {
        // SAFETY: construct_array copies the valid items (the caller's contract) with
        // this type's layout; it does not keep or write the slice.
        unsafe {
            let array = pg_sys::construct_array(
                items.as_ptr() as *mut Datum,
                items.len() as i32,
                self.type_oid,
                self.length as i32,
                self.by_value,
                self.alignment,
            );
            Datum::from(array)
        }
    }
}

/// The elements of an array (None for NULL), given its element type's layout.
///
/// # Safety
/// `array` must be a valid, non-NULL array whose elements have this type and layout.
pub unsafe fn array_elements(
    array: Datum,
    element_type: Oid,
    length: i16,
    by_value: bool,
    alignment: c_char,
) -> Vec<Option<Datum>> {
    // SAFETY: a valid array with this element layout (the caller's contract), detoasted;
    // deconstruct_array fills `count` values and nulls, read within that count.
    unsafe {
        let array = pg_sys::pg_detoast_datum(array.cast_mut_ptr()) as *mut pg_sys::ArrayType;
        let mut values: *mut Datum = std::ptr::null_mut();
        let mut nulls: *mut bool = std::ptr::null_mut();
        let mut count = 0;
        pg_sys::deconstruct_array(
            array,
            element_type,
            length as i32,
            by_value,
            alignment,
            &mut values,
            &mut nulls,
            &mut count,
        );
        (0..count as usize)
            .map(|i| (!*nulls.add(i)).then(|| *values.add(i)))
            .collect()
    }
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use super::ItemType;
    use pgrx::pg_sys::{self, Datum};
    use pgrx::prelude::*;

    /// A state's item images come from our serial function only, but are checked anyway:
    /// a varlena must be inline, uncompressed and as long as its header says (a crafted
    /// indirect pointer crashed a server when a Citus combine deserialized it).
    #[pg_test]
    fn item_images_are_checked() {
        let text = ItemType::lookup(pg_sys::TEXTOID, pg_sys::DEFAULT_COLLATION_OID).unwrap();
        let short = [(4u8 << 1) | 1, b'a', b'b', b'c'];
        assert!(text.is_image(&short));
        let long = [((7u32) << 2).to_le_bytes().as_slice(), b"abc"].concat();
        assert!(text.is_image(&long));
        let mut indirect = vec![0x01, 0x01];
        indirect.extend_from_slice(&0x4141_4141_4141_4141u64.to_le_bytes());
        assert!(!text.is_image(&indirect), "an external pointer");
        assert!(!text.is_image(&short[..3]), "shorter than its header");
        let compressed = [((7u32 << 2) | 2).to_le_bytes().as_slice(), b"abc"].concat();
        assert!(!text.is_image(&compressed), "compressed");
        assert!(!text.is_image(&[]));
        let integer = ItemType::lookup(pg_sys::INT4OID, pg_sys::InvalidOid).unwrap();
        assert!(integer.is_image(&[0; std::mem::size_of::<usize>()]));
        assert!(!integer.is_image(&[0; 3]));
        let uuid = ItemType::lookup(pg_sys::UUIDOID, pg_sys::InvalidOid).unwrap();
        assert!(uuid.is_image(&[0; 16]));
        assert!(!uuid.is_image(&[0; 15]));
    }

    /// A row added outside pgrx's guard reads its item's key only where PostgreSQL need
    /// not: a varlena is refused, by its header alone, when compressed or out of line
    /// (only pg_detoast_datum could read it), as is an item compared by its type's
    /// functions; an inline varlena's key is the one the guarded path reads.
    #[pg_test]
    fn keys_in_place_refuse_what_only_postgresql_can_read() {
        let text = ItemType::lookup(pg_sys::TEXTOID, pg_sys::DEFAULT_COLLATION_OID).unwrap();
        let abcd = u32::from_le_bytes(*b"abcd");
        let plain = [8u32 << 2, abcd];
        let short = [
            u32::from_le_bytes([(5 << 1) | 1, b'a', b'b', b'c']),
            u32::from(b'd'),
        ];
        let compressed = [(8u32 << 2) | 2, abcd, abcd];
        let external = [0x01 | (18 << 8), 0, 0, 0, 0, 0];
        let in_place = |words: &[u32]| {
            let item = Datum::from(words.as_ptr());
            // SAFETY: varlena headers (and for the inline ones, their bytes), read by
            // header alone for the others; key is only called on the inline ones.
            unsafe {
                let key = text.key_in_place(item).map(|key| format!("{key:?}"));
                if key.is_some() {
                    assert_eq!(key, Some(format!("{:?}", text.key(item))));
                }
                key
            }
        };
        assert!(in_place(&plain).is_some_and(|key| key.contains("[97, 98, 99, 100]")));
        assert!(in_place(&short).is_some_and(|key| key.contains("[97, 98, 99, 100]")));
        assert_eq!(in_place(&compressed), None, "compressed");
        assert_eq!(in_place(&external), None, "out of line");
        let numeric = ItemType::lookup(pg_sys::NUMERICOID, pg_sys::InvalidOid).unwrap();
        // SAFETY: an item compared by its type's functions is refused unread.
        assert!(unsafe { numeric.key_in_place(Datum::from(0usize)) }.is_none());
        let integer = ItemType::lookup(pg_sys::INT4OID, pg_sys::InvalidOid).unwrap();
        // SAFETY: a by-value item's bits.
        assert!(unsafe { integer.key_in_place(Datum::from(7)) }.is_some());
    }
}

#[cfg(test)]
mod byte_tests {
    use super::same_bytes;

    /// Every length the word-wise paths take and past them, with one byte changed at every
    /// place: equal exactly when the slices are.
    #[test]
    fn same_bytes_is_slice_equality() {
        for length in 0..40usize {
            let a: Vec<u8> = (0..length as u8).map(|i| i.wrapping_mul(37)).collect();
            assert!(same_bytes(&a, &a.clone()), "length {length}");
            for at in 0..length {
                let mut b = a.clone();
                b[at] ^= 0x80;
                assert!(!same_bytes(&a, &b), "length {length}, byte {at}");
            }
            let mut longer = a.clone();
            longer.push(0);
            assert!(!same_bytes(&a, &longer) && !same_bytes(&longer, &a));
        }
    }
}
