//! Items of any type, compared and hashed the way PostgreSQL compares them.
//!
//! Equality and hashing come from the type's default hash operator class (through the type
//! cache), with the aggregate's input collation: 'A' and 'a' are one item under a
//! case-insensitive nondeterministic collation, exactly as in a `GROUP BY`.

use crate::error::Error;
use pgrx::pg_sys::{self, Datum, Oid};
use std::ffi::{c_char, CStr};

/// How to hash, compare, copy and serialize the items of one type.
#[derive(Clone, Copy)]
pub struct ItemType {
    pub type_oid: Oid,
    pub collation: Oid,
    length: i16,
    by_value: bool,
    alignment: c_char,
    /// Owned by the type cache, which lives as long as the backend.
    hash: *mut pg_sys::FmgrInfo,
    equal: *mut pg_sys::FmgrInfo,
}

/// The name of a type, as `format_type_be` prints it.
pub fn type_name(type_oid: Oid) -> String {
    unsafe { CStr::from_ptr(pg_sys::format_type_be(type_oid)) }
        .to_string_lossy()
        .into_owned()
}

impl ItemType {
    /// Looks up the type's hash and equality functions; a type without a default hash
    /// operator class (point, xml, ...) cannot be an item.
    pub fn lookup(type_oid: Oid, collation: Oid) -> Result<Self, Error> {
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
            Ok(Self {
                type_oid,
                collation,
                length: (*entry).typlen,
                by_value: (*entry).typbyval,
                alignment: (*entry).typalign,
                hash: &mut (*entry).hash_proc_finfo,
                equal: &mut (*entry).eq_opr_finfo,
            })
        }
    }

    pub fn hash(&self, item: Datum) -> u32 {
        unsafe { pg_sys::FunctionCall1Coll(self.hash, self.collation, item).value() as u32 }
    }

    pub fn equal(&self, a: Datum, b: Datum) -> bool {
        unsafe { pg_sys::FunctionCall2Coll(self.equal, self.collation, a, b).value() != 0 }
    }

    /// The bytes of a by-reference item, detoasted (never a TOAST pointer or short header).
    ///
    /// # Safety
    /// `item` must be a valid, non-NULL datum of this type.
    unsafe fn image<'a>(&self, item: Datum) -> &'a [u8] {
        let (pointer, length) = match self.length {
            -1 => {
                let flat = pg_sys::pg_detoast_datum(item.cast_mut_ptr());
                (flat as *const u8, pgrx::varsize_any(flat))
            }
            -2 => {
                let text = item.cast_mut_ptr::<c_char>();
                (text as *const u8, CStr::from_ptr(text).to_bytes_with_nul().len())
            }
            n => (item.cast_mut_ptr::<u8>() as *const u8, n as usize),
        };
        std::slice::from_raw_parts(pointer, length)
    }

    /// A copy of `item` in the current memory context.
    ///
    /// # Safety
    /// `item` must be a valid, non-NULL datum of this type.
    pub unsafe fn copy(&self, item: Datum) -> Datum {
        if self.by_value {
            item
        } else {
            self.restore(self.image(item))
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
            out.extend_from_slice(self.image(item));
        }
        (out.len() - start) as u32
    }

    /// An item rebuilt from the bytes [`ItemType::write_image`] wrote, in the current
    /// memory context.
    pub fn restore(&self, bytes: &[u8]) -> Datum {
        if self.by_value {
            let mut word = [0u8; std::mem::size_of::<usize>()];
            word.copy_from_slice(bytes);
            Datum::from(usize::from_ne_bytes(word))
        } else {
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
        array_elements(array, self.type_oid, self.length, self.by_value, self.alignment)
            .into_iter()
            .flatten()
            .collect()
    }

    /// A one-dimensional array of `items`, in the current memory context.
    pub fn array(&self, items: &[Datum]) -> Datum {
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
