//! Element types: libckpt's dtypes, and the Rust types that hold them.
use std::ffi::{CStr, CString};
use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};
use crate::sys;

/// A tensor's element type (`ckpt_dtype`; the names are safetensors').
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dtype {
    Bool,
    /// float4 e2m1, two per byte.
    F4,
    F6E2M3,
    F6E3M2,
    U8,
    I8,
    F8E5M2,
    /// torch.float8_e4m3fn.
    F8E4M3,
    /// torch.float8_e8m0fnu.
    F8E8M0,
    F8E4M3Fnuz,
    F8E5M2Fnuz,
    I16,
    U16,
    F16,
    BF16,
    I32,
    U32,
    F32,
    /// complex64: two float32.
    C64,
    F64,
    I64,
    U64,
    /// A dtype number this binding does not name (a newer library).
    Other(i32),
}

const DTYPES: &[(Dtype, i32)] = &[
    (Dtype::Bool, sys::CKPT_BOOL),
    (Dtype::F4, sys::CKPT_F4),
    (Dtype::F6E2M3, sys::CKPT_F6_E2M3),
    (Dtype::F6E3M2, sys::CKPT_F6_E3M2),
    (Dtype::U8, sys::CKPT_U8),
    (Dtype::I8, sys::CKPT_I8),
    (Dtype::F8E5M2, sys::CKPT_F8_E5M2),
    (Dtype::F8E4M3, sys::CKPT_F8_E4M3),
    (Dtype::F8E8M0, sys::CKPT_F8_E8M0),
    (Dtype::F8E4M3Fnuz, sys::CKPT_F8_E4M3FNUZ),
    (Dtype::F8E5M2Fnuz, sys::CKPT_F8_E5M2FNUZ),
    (Dtype::I16, sys::CKPT_I16),
    (Dtype::U16, sys::CKPT_U16),
    (Dtype::F16, sys::CKPT_F16),
    (Dtype::BF16, sys::CKPT_BF16),
    (Dtype::I32, sys::CKPT_I32),
    (Dtype::U32, sys::CKPT_U32),
    (Dtype::F32, sys::CKPT_F32),
    (Dtype::C64, sys::CKPT_C64),
    (Dtype::F64, sys::CKPT_F64),
    (Dtype::I64, sys::CKPT_I64),
    (Dtype::U64, sys::CKPT_U64),
];

impl Dtype {
    /// Every dtype this binding names, in libckpt's order.
    pub fn all() -> impl Iterator<Item = Dtype> {
        DTYPES.iter().map(|(d, _)| *d)
    }

    pub(crate) fn from_raw(raw: sys::ckpt_dtype) -> Dtype {
        DTYPES.iter().find(|(_, c)| *c == raw).map(|(d, _)| *d).unwrap_or(Dtype::Other(raw))
    }

    pub(crate) fn raw(self) -> sys::ckpt_dtype {
        match self {
            Dtype::Other(c) => c,
            d => DTYPES.iter().find(|(t, _)| *t == d).map(|(_, c)| *c).unwrap_or(sys::CKPT_DTYPE_INVALID),
        }
    }

    /// The safetensors name: "BF16", "F8_E4M3", … ("?" for an unknown number).
    pub fn name(self) -> &'static str {
        let p = unsafe { sys::ckpt_dtype_name(self.raw()) };
        if p.is_null() {
            "?"
        } else {
            unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("?")
        }
    }

    /// Bits per element (4 for F4, 6 for F6, 64 for C64, …).
    pub fn bits(self) -> u32 {
        unsafe { sys::ckpt_dtype_bits(self.raw()) }
    }

    /// Whether libckpt converts `self` to `to` (see `ckpt_can_cast`).
    pub fn can_cast_to(self, to: Dtype) -> bool {
        unsafe { sys::ckpt_can_cast(self.raw(), to.raw()) != 0 }
    }

    /// Bytes for `numel` elements, or None when not a whole number of bytes
    /// or when it overflows.
    pub fn nbytes(self, numel: u64) -> Option<u64> {
        let bits = numel.checked_mul(self.bits() as u64)?;
        if bits % 8 != 0 || self.bits() == 0 {
            None
        } else {
            Some(bits / 8)
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Parses a safetensors name ("BF16", "F8_E4M3"), case-insensitively, or a
/// torch-style alias ("bfloat16", "float32", "half", "f32", "int64" …).
impl FromStr for Dtype {
    type Err = Error;
    fn from_str(s: &str) -> Result<Dtype> {
        let alias = match s.to_ascii_lowercase().as_str() {
            "bfloat16" => "BF16",
            "float16" | "half" => "F16",
            "float32" | "float" => "F32",
            "float64" | "double" => "F64",
            "int8" => "I8",
            "int16" => "I16",
            "int32" => "I32",
            "int64" | "long" => "I64",
            "uint8" => "U8",
            "uint16" => "U16",
            "uint32" => "U32",
            "uint64" => "U64",
            "complex64" => "C64",
            "float8_e4m3fn" => "F8_E4M3",
            "float8_e5m2" => "F8_E5M2",
            "float8_e8m0fnu" => "F8_E8M0",
            "float8_e4m3fnuz" => "F8_E4M3FNUZ",
            "float8_e5m2fnuz" => "F8_E5M2FNUZ",
            _ => "",
        };
        let name = if alias.is_empty() { s.to_ascii_uppercase() } else { alias.to_string() };
        let c = CString::new(name).map_err(|_| Error::argument(None, format!("dtype name {:?} has a NUL byte", s)))?;
        match unsafe { sys::ckpt_dtype_from_name(c.as_ptr()) } {
            sys::CKPT_DTYPE_INVALID => Err(Error::Argument {
                status: crate::Status::Unsupported,
                detail: crate::Detail::from_code(sys::CKPT_D_UNKNOWN_DTYPE),
                tensor: None,
                message: format!("unknown dtype {:?}", s),
            }),
            raw => Ok(Dtype::from_raw(raw)),
        }
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A Rust type that holds a dtype's elements as they are in memory
/// (little-endian): `f32`, `f64`, `u16` for F16 and BF16 (their bits), `i64`,
/// `u8` for U8, BOOL and the float8 types, `[f32; 2]` for C64, ….
///
/// # Safety
/// Implemented only in this crate, for plain types whose every bit pattern
/// is a valid value.
pub unsafe trait Element: sealed::Sealed + Copy + Default + Send + Sync + 'static {
    /// The Rust type's name, for errors.
    const NAME: &'static str;
    /// Whether tensors of `dtype` can be read into, or written from, `[Self]`.
    fn holds(dtype: Dtype) -> bool;
}

macro_rules! element {
    ($t:ty, $name:expr, $($d:pat_param)|+) => {
        impl sealed::Sealed for $t {}
        unsafe impl Element for $t {
            const NAME: &'static str = $name;
            fn holds(dtype: Dtype) -> bool {
                matches!(dtype, $($d)|+)
            }
        }
    };
}

element!(f32, "f32", Dtype::F32);
element!(f64, "f64", Dtype::F64);
element!(u16, "u16", Dtype::U16 | Dtype::F16 | Dtype::BF16);
element!(i16, "i16", Dtype::I16);
element!(i32, "i32", Dtype::I32);
element!(u32, "u32", Dtype::U32);
element!(i64, "i64", Dtype::I64);
element!(u64, "u64", Dtype::U64);
element!(i8, "i8", Dtype::I8);
element!(
    u8,
    "u8",
    Dtype::U8
        | Dtype::Bool
        | Dtype::F8E5M2
        | Dtype::F8E4M3
        | Dtype::F8E8M0
        | Dtype::F8E4M3Fnuz
        | Dtype::F8E5M2Fnuz
);
element!([f32; 2], "[f32; 2]", Dtype::C64);

/// Checks that `len` elements of `T` are exactly a tensor of `numel`
/// elements of `dtype` (`what` names it in the error).
pub(crate) fn check_typed<T: Element>(dtype: Dtype, numel: u64, len: usize, what: &str) -> Result<()> {
    if !T::holds(dtype) {
        return Err(Error::argument(
            Some(what),
            format!("tensor '{}' is {}: a [{}] cannot hold it", what, dtype.name(), T::NAME),
        ));
    }
    if len as u64 != numel {
        return Err(Error::argument(
            Some(what),
            format!("tensor '{}' has {} elements, the slice {}", what, numel, len),
        ));
    }
    Ok(())
}

/// Views a typed slice as its bytes.
pub(crate) fn as_bytes<T: Element>(s: &[T]) -> &[u8] {
    // SAFETY: Element types are plain data without padding.
    unsafe { std::slice::from_raw_parts(s.as_ptr() as *const u8, std::mem::size_of_val(s)) }
}

/// Views a typed slice as its bytes, mutably.
pub(crate) fn as_bytes_mut<T: Element>(s: &mut [T]) -> &mut [u8] {
    // SAFETY: Element types accept every bit pattern.
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr() as *mut u8, std::mem::size_of_val(s)) }
}
