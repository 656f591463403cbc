//! Raw declarations of libckpt's public interface (`include/ckpt.h`).
//!
//! This file is the only place the Rust binding restates the C header, so
//! that it is easy to update when the header changes.  Rules it follows:
//!
//! - Structs the library owns (`ckpt_tensor_info`, `ckpt_plan_item`) are
//!   only ever read through the pointers the library returns.  Their fields
//!   are declared as a *prefix* of the C struct: the library may append
//!   fields, so never allocate, copy or take `size_of` of them.
//! - Option structs (`ckpt_writer_options`, `ckpt_load_options`) and
//!   caller-filled output structs (`ckpt_load_stats`) are only initialised
//!   by the library (`*_init`, or the call that fills them), never built
//!   field by field; [`Reserved`] gives them room to grow at their end.
//! - `ckpt_error` is caller-allocated with the header's exact layout.
//!
//! Safe wrappers live in the `ckpt` crate.
#![allow(non_camel_case_types)]


use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::os::raw::{c_char, c_int, c_uint};

/// A value of an object tree (opaque; read through the `ckpt_value_*` accessors).
#[repr(C)]
pub struct ckpt_value {
    _opaque: [u8; 0],
}
pub type ckpt_value_kind = c_int;
pub const CKPT_VALUE_NULL: ckpt_value_kind = 0;
pub const CKPT_VALUE_BOOL: ckpt_value_kind = 1;
pub const CKPT_VALUE_INT: ckpt_value_kind = 2;
pub const CKPT_VALUE_FLOAT: ckpt_value_kind = 3;
pub const CKPT_VALUE_NUMBER: ckpt_value_kind = 4;
pub const CKPT_VALUE_STRING: ckpt_value_kind = 5;
pub const CKPT_VALUE_BYTES: ckpt_value_kind = 6;
pub const CKPT_VALUE_BIGINT: ckpt_value_kind = 7;
pub const CKPT_VALUE_TENSOR: ckpt_value_kind = 8;
pub const CKPT_VALUE_GLOBAL: ckpt_value_kind = 9;
pub const CKPT_VALUE_LIST: ckpt_value_kind = 10;
pub const CKPT_VALUE_TUPLE: ckpt_value_kind = 11;
pub const CKPT_VALUE_SET: ckpt_value_kind = 12;
pub const CKPT_VALUE_CALL: ckpt_value_kind = 13;
pub const CKPT_VALUE_DICT: ckpt_value_kind = 14;
pub const CKPT_VALUE_OBJECT: ckpt_value_kind = 15;

pub type ckpt_status = c_int;
pub const CKPT_OK: ckpt_status = 0;
pub const CKPT_E_INVALID_ARGUMENT: ckpt_status = 1;
pub const CKPT_E_NO_MEMORY: ckpt_status = 2;
pub const CKPT_E_IO: ckpt_status = 3;
pub const CKPT_E_NOT_FOUND: ckpt_status = 4;
pub const CKPT_E_EXISTS: ckpt_status = 5;
pub const CKPT_E_UNKNOWN_FORMAT: ckpt_status = 6;
pub const CKPT_E_CANCELLED: ckpt_status = 7;
pub const CKPT_E_OUT_OF_RANGE: ckpt_status = 8;
pub const CKPT_E_BAD_STATE: ckpt_status = 9;
pub const CKPT_E_BAD_SIZE: ckpt_status = 10;
pub const CKPT_E_NO_SPACE: ckpt_status = 11;
pub const CKPT_E_TRUNCATED: ckpt_status = 12;
pub const CKPT_E_LIMIT: ckpt_status = 13;
pub const CKPT_E_HEADER_TOO_SMALL: ckpt_status = 20;
pub const CKPT_E_HEADER_TOO_LARGE: ckpt_status = 21;
pub const CKPT_E_HEADER_PAST_END: ckpt_status = 22;
pub const CKPT_E_HEADER_NOT_UTF8: ckpt_status = 23;
pub const CKPT_E_HEADER_NOT_JSON: ckpt_status = 24;
pub const CKPT_E_HEADER_SCHEMA: ckpt_status = 25;
pub const CKPT_E_METADATA_NOT_STRING: ckpt_status = 26;
pub const CKPT_E_UNKNOWN_DTYPE: ckpt_status = 27;
pub const CKPT_E_SHAPE_OVERFLOW: ckpt_status = 28;
pub const CKPT_E_PARTIAL_BYTE: ckpt_status = 29;
pub const CKPT_E_SIZE_MISMATCH: ckpt_status = 30;
pub const CKPT_E_DATA_HOLE: ckpt_status = 31;
pub const CKPT_E_DATA_OVERLAP: ckpt_status = 32;
pub const CKPT_E_TRAILING_BYTES: ckpt_status = 33;
pub const CKPT_E_DUPLICATE_NAME: ckpt_status = 34;
pub const CKPT_E_BAD_OFFSETS: ckpt_status = 35;
pub const CKPT_E_INDEX_INVALID: ckpt_status = 40;
pub const CKPT_E_INDEX_MISMATCH: ckpt_status = 41;
pub const CKPT_E_ZIP_INVALID: ckpt_status = 50;
pub const CKPT_E_ZIP_UNSUPPORTED: ckpt_status = 51;
pub const CKPT_E_CHECKSUM: ckpt_status = 52;
pub const CKPT_E_PICKLE_INVALID: ckpt_status = 60;
pub const CKPT_E_PICKLE_FORBIDDEN: ckpt_status = 61;
pub const CKPT_E_INCOMPLETE: ckpt_status = 14;
pub const CKPT_E_NO_MATCH: ckpt_status = 15;
pub const CKPT_E_UNSAFE_PATH: ckpt_status = 16;
pub const CKPT_E_LOCKED: ckpt_status = 17;
pub const CKPT_E_GGUF_VERSION: ckpt_status = 70;
pub const CKPT_E_GGUF_LENGTH: ckpt_status = 71;
pub const CKPT_E_GGUF_COUNT: ckpt_status = 72;
pub const CKPT_E_GGUF_KV_TYPE: ckpt_status = 73;
pub const CKPT_E_GGUF_TENSOR_TYPE: ckpt_status = 74;
pub const CKPT_E_GGUF_DIMS: ckpt_status = 75;
pub const CKPT_E_GGUF_ALIGNMENT: ckpt_status = 76;
pub const CKPT_E_GGUF_OFFSET: ckpt_status = 77;
pub const CKPT_E_GGUF_SPLIT: ckpt_status = 78;
pub const CKPT_E_UNSUPPORTED_DTYPE: ckpt_status = 79;
pub const CKPT_E_DCP_METADATA: ckpt_status = 80;
pub const CKPT_E_DCP_CHUNK_HOLE: ckpt_status = 81;
pub const CKPT_E_DCP_CHUNK_OVERLAP: ckpt_status = 82;
pub const CKPT_E_DCP_CHUNK_BOUNDS: ckpt_status = 83;
pub const CKPT_E_DCP_CHUNK_MISMATCH: ckpt_status = 84;
pub const CKPT_E_DCP_PATH: ckpt_status = 85;
pub const CKPT_E_DCP_UNSUPPORTED: ckpt_status = 86;
pub const CKPT_E_NPY_INVALID: ckpt_status = 90;
pub const CKPT_E_MSGPACK_INVALID: ckpt_status = 91;
pub const CKPT_E_HTTP_STATUS: ckpt_status = 100;
pub const CKPT_E_HTTP_AUTH: ckpt_status = 101;
pub const CKPT_E_REMOTE_CHANGED: ckpt_status = 102;
pub const CKPT_E_NO_RANGES: ckpt_status = 103;
pub const CKPT_E_NETWORK: ckpt_status = 104;
pub const CKPT_E_TIMEOUT: ckpt_status = 105;
pub const CKPT_E_BAD_RESPONSE: ckpt_status = 106;
pub const CKPT_E_UNSUPPORTED_SOURCE: ckpt_status = 107;
pub const CKPT_E_PEER_FAILED: ckpt_status = 110;
pub const CKPT_E_PEER_TIMEOUT: ckpt_status = 111;
pub const CKPT_E_COMM: ckpt_status = 112;
pub const CKPT_E_COMM_DATA: ckpt_status = 113;

/// `ckpt_error`: caller-allocated, filled on failure.
#[repr(C)]
pub struct ckpt_error {
    pub status: ckpt_status,
    pub sys_errno: c_int,
    pub offset: i64,
    pub path: [c_char; 1024],
    pub tensor: [c_char; 512],
    pub message: [c_char; 2048],
}

pub type ckpt_dtype = c_int;
pub const CKPT_DTYPE_INVALID: ckpt_dtype = 0;
pub const CKPT_BOOL: ckpt_dtype = 1;
pub const CKPT_F4: ckpt_dtype = 2;
pub const CKPT_F6_E2M3: ckpt_dtype = 3;
pub const CKPT_F6_E3M2: ckpt_dtype = 4;
pub const CKPT_U8: ckpt_dtype = 5;
pub const CKPT_I8: ckpt_dtype = 6;
pub const CKPT_F8_E5M2: ckpt_dtype = 7;
pub const CKPT_F8_E4M3: ckpt_dtype = 8;
pub const CKPT_F8_E8M0: ckpt_dtype = 9;
pub const CKPT_F8_E4M3FNUZ: ckpt_dtype = 10;
pub const CKPT_F8_E5M2FNUZ: ckpt_dtype = 11;
pub const CKPT_I16: ckpt_dtype = 12;
pub const CKPT_U16: ckpt_dtype = 13;
pub const CKPT_F16: ckpt_dtype = 14;
pub const CKPT_BF16: ckpt_dtype = 15;
pub const CKPT_I32: ckpt_dtype = 16;
pub const CKPT_U32: ckpt_dtype = 17;
pub const CKPT_F32: ckpt_dtype = 18;
pub const CKPT_C64: ckpt_dtype = 19;
pub const CKPT_F64: ckpt_dtype = 20;
pub const CKPT_I64: ckpt_dtype = 21;
pub const CKPT_U64: ckpt_dtype = 22;
/// GGUF's block-quantized types are CKPT_Q4_0 (23) ... CKPT_Q1_0 (48).
pub const CKPT_Q4_0: ckpt_dtype = 23;
pub const CKPT_Q8_0: ckpt_dtype = 27;
pub const CKPT_Q1_0: ckpt_dtype = 48;
pub const CKPT_DTYPE_COUNT: c_int = 49;

pub type ckpt_format = c_int;
pub const CKPT_FORMAT_SAFETENSORS: ckpt_format = 1;
pub const CKPT_FORMAT_SAFETENSORS_SHARDED: ckpt_format = 2;
pub const CKPT_FORMAT_TORCH: ckpt_format = 3;
pub const CKPT_FORMAT_TORCH_SHARDED: ckpt_format = 4;
pub const CKPT_FORMAT_GGUF: ckpt_format = 5;
pub const CKPT_FORMAT_DCP: ckpt_format = 6;
pub const CKPT_FORMAT_NPY: ckpt_format = 7;
pub const CKPT_FORMAT_NPZ: ckpt_format = 8;
pub const CKPT_FORMAT_FLAX_MSGPACK: ckpt_format = 9;

pub const CKPT_MAX_DIMS: u32 = 64;
pub const CKPT_DEFAULT_MAX_SHARD_SIZE: u64 = 5_000_000_000;
pub const CKPT_CHECKSUM_METADATA_KEY: &str = "ckpt.xxh3_64";

pub type ckpt_io_mode = c_int;
pub const CKPT_IO_AUTO: ckpt_io_mode = 0;
pub const CKPT_IO_BUFFERED: ckpt_io_mode = 1;
pub const CKPT_IO_DIRECT: ckpt_io_mode = 2;

/// ckpt_commit_recover's flag: check the journal and report; change nothing.
pub const CKPT_RECOVER_CHECK: c_uint = 1;

pub type ckpt_mismatch = c_int;
pub const CKPT_MATCH_MISSING: ckpt_mismatch = 1;
pub const CKPT_MATCH_UNEXPECTED: ckpt_mismatch = 2;
pub const CKPT_MATCH_SHAPE: ckpt_mismatch = 3;
pub const CKPT_MATCH_DTYPE: ckpt_mismatch = 4;
pub const CKPT_MATCH_CAST: c_uint = 1;
pub const CKPT_MATCH_PRUNE: c_uint = 2;

#[repr(C)]
pub struct ckpt_catalog {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct ckpt_writer {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct ckpt_plan {
    _opaque: [u8; 0],
}

/// A prefix of `ckpt_tensor_info`: read through library pointers only.
#[repr(C)]
pub struct ckpt_tensor_info {
    pub name: *const c_char,
    pub dtype: ckpt_dtype,
    pub ndim: u32,
    pub shape: *const u64,
    pub numel: u64,
    pub nbytes: u64,
    pub file: u32,
    pub offset: u64,
    pub strides: *const i64,
    pub storage: u32,
    pub big_endian: u8,
    pub compressed: u8,
}

/// A prefix of `ckpt_plan_item`: read through library pointers only.
#[repr(C)]
pub struct ckpt_plan_item {
    pub name: *const c_char,
    pub source: *const ckpt_tensor_info,
    pub dtype: ckpt_dtype,
    pub ndim: u32,
    pub shape: *const u64,
    pub numel: u64,
    pub nbytes: u64,
    pub slice_start: *const u64,
    pub slice_count: *const u64,
    pub perm: *const u32,
    pub data: *mut c_void,
    pub is_view: u8,
    pub transform: u8,
}

pub type ckpt_progress_fn = Option<unsafe extern "C" fn(done: u64, total: u64, user: *mut c_void) -> c_int>;

/// Room for a library-initialised struct to grow at its end: the binding
/// allocates `Reserved<T>`, lets `*_init` fill it, then sets known fields.
#[repr(C)]
pub struct Reserved<T> {
    pub value: T,
    _room: [u64; 64],
}

impl<T> Reserved<T> {
    /// All-zero storage, to be filled by the library's `*_init` function.
    ///
    /// # Safety
    /// `T` must be a plain C struct for which all-zero bytes are valid.
    pub unsafe fn zeroed() -> Self {
        MaybeUninit::<Self>::zeroed().assume_init()
    }
}

/// `ckpt_catalog_options`: initialise with `ckpt_catalog_options_init_sized` (sets `size`).
#[repr(C)]
pub struct ckpt_catalog_options {
    pub size: usize,
    pub allowed_globals: *const *const c_char,
    pub allowed_global_count: usize,
}

/// `ckpt_gguf_writer_options` (`ckpt_gguf.h`): GGUF output's own options,
/// given as `ckpt_writer_options::gguf`; zeroed with `size` set is the default.
#[repr(C)]
pub struct ckpt_gguf_writer_options {
    pub size: usize,
    /// At most this many tensors per split file (0: no limit).
    pub split_max_tensors: u64,
}

/// `ckpt_dcp_writer_options` (`ckpt_dcp.h`): DCP output's own options,
/// given as `ckpt_writer_options::dcp`; zeroed with `size` set is the default.
#[repr(C)]
pub struct ckpt_dcp_writer_options {
    pub size: usize,
    /// The ranks that appear to have saved it (0 means 1).
    pub ranks: u32,
}

#[repr(C)]
pub struct ckpt_writer_options {
    pub size: usize,
    pub max_shard_size: u64,
    pub prefix: *const c_char,
    pub overwrite: c_int,
    pub no_sync: c_int,
    pub checksums: c_int,
    pub copy_partial_views: c_int,
    pub format: c_int,
    pub copy_files_from: *const c_char,
    /// GGUF output's own options (NULL: defaults).
    pub gguf: *const ckpt_gguf_writer_options,
    /// Metadata adding to or replacing the source's: a JSON object text (NULL: none).
    pub metadata_json: *const c_char,
    /// DCP output's own options (NULL: defaults).
    pub dcp: *const ckpt_dcp_writer_options,
    /// Non-zero: plan and check only; nothing is written (ckpt_convert_plan_preview).
    pub dry_run: c_int,
    /// Non-zero: an index records "total_parameters" as transformers' save_pretrained does.
    pub total_parameters: c_int,
    /// Non-zero: a conversion does not check the source's ZIP CRC-32s.
    pub skip_crc_check: c_int,
    /// Non-zero: a conversion into GGUF carries a non-GGUF source's metadata as key-values.
    pub source_metadata: c_int,
    /// Non-zero: the path is the one file written, whatever its name (no destination rule).
    pub exact_file: c_int,
    /// Progress of `ckpt_convert_plan` / `ckpt_convert_collective` (bytes written); non-zero cancels.
    pub progress: ckpt_progress_fn,
    pub user: *mut c_void,
}

/// `ckpt_source_ops` (a source's table of functions): opaque here; the
/// library's memory source is [`ckpt_memory_source_ops`].
#[repr(C)]
pub struct ckpt_source_ops {
    _private: [u8; 0],
}

/// `ckpt_memory_source`: one file held in memory (the `user` of
/// [`ckpt_memory_source_ops`]); it and its bytes must outlive the catalog.
#[repr(C)]
pub struct ckpt_memory_source {
    pub data: *const c_void,
    pub size: u64,
}

/// `ckpt_verify_options`: initialise with `ckpt_verify_options_init_sized` (sets `size`).
#[repr(C)]
pub struct ckpt_verify_options {
    pub size: usize,
    pub progress: ckpt_progress_fn,
    pub user: *mut c_void,
}

/// What `ckpt_verify` checked; set `size` before the call.
#[repr(C)]
pub struct ckpt_verify_report {
    pub size: usize,
    pub tensor_digests: usize,
    pub header_digests: usize,
    pub zip_crc32: usize,
    pub bytes: u64,
    pub tensors: usize,
}

/// Where a tensor's bytes lie in the caller's memory (ckpt_writer_add_tensor_shared).
#[repr(C)]
pub struct ckpt_tensor_storage {
    pub id: u64,
    pub nbytes: u64,
    pub begin: u64,
    pub end: u64,
    pub contiguous: c_int,
}

#[repr(C)]
pub struct ckpt_load_options {
    pub size: usize,
    pub threads: c_uint,
    pub chunk_bytes: u64,
    pub io: ckpt_io_mode,
    pub io_uring: c_int,
    pub views: c_int,
    pub progress: ckpt_progress_fn,
    pub user: *mut c_void,
    /// Called once per plan item as soon as its bytes are in place (may be NULL).
    pub item_done: Option<unsafe extern "C" fn(item: usize, user: *mut c_void) -> c_int>,
    pub item_done_user: *mut c_void,
    /// Non-zero: a load does not check the CRC-32s of ZIP members.
    pub skip_crc_check: c_int,
}

#[repr(C)]
pub struct ckpt_load_stats {
    pub bytes_needed: u64,
    pub bytes_read: u64,
    pub reads: u64,
    pub tasks: u64,
    pub threads: c_uint,
    pub ring_bytes: u64,
    pub direct: c_int,
    pub io_uring: c_int,
    pub views: u64,
}

/// Caller-built array element of ckpt_plan_match.
#[repr(C)]
pub struct ckpt_expected {
    pub name: *const c_char,
    pub dtype: ckpt_dtype,
    pub ndim: u32,
    pub shape: *const u64,
}

/// A prefix of `ckpt_match_entry`, read through library pointers.
#[repr(C)]
pub struct ckpt_match_entry {
    pub kind: ckpt_mismatch,
    pub name: *const c_char,
    pub expected: usize,
    pub item: usize,
}

extern "C" {
    pub fn ckpt_version() -> *const c_char;
    pub fn ckpt_status_name(status: ckpt_status) -> *const c_char;
    pub fn ckpt_status_message(status: ckpt_status) -> *const c_char;
    pub fn ckpt_error_clear(err: *mut ckpt_error);

    pub fn ckpt_dtype_name(dtype: ckpt_dtype) -> *const c_char;
    pub fn ckpt_dtype_from_name(name: *const c_char) -> ckpt_dtype;
    pub fn ckpt_dtype_bits(dtype: ckpt_dtype) -> c_uint;

    pub fn ckpt_format_name(format: ckpt_format) -> *const c_char;
    pub fn ckpt_format_from_name(name: *const c_char) -> ckpt_format;
    pub fn ckpt_format_for_path(path: *const c_char) -> ckpt_format;

    pub fn ckpt_catalog_open(path: *const c_char, out: *mut *mut ckpt_catalog, err: *mut ckpt_error) -> ckpt_status;
    /// Fills the first `size` bytes (the caller's `size_of`) with the defaults.
    pub fn ckpt_catalog_options_init_sized(options: *mut ckpt_catalog_options, size: usize);
    pub fn ckpt_catalog_open_ex(
        path: *const c_char,
        options: *const ckpt_catalog_options,
        out: *mut *mut ckpt_catalog,
        err: *mut ckpt_error,
    ) -> ckpt_status;
    pub fn ckpt_catalog_close(catalog: *mut ckpt_catalog);
    pub fn ckpt_catalog_format(catalog: *const ckpt_catalog) -> ckpt_format;
    pub fn ckpt_catalog_tensor_count(catalog: *const ckpt_catalog) -> usize;
    pub fn ckpt_catalog_tensor(catalog: *const ckpt_catalog, i: usize) -> *const ckpt_tensor_info;
    pub fn ckpt_catalog_find(catalog: *const ckpt_catalog, name: *const c_char) -> *const ckpt_tensor_info;
    pub fn ckpt_catalog_file_count(catalog: *const ckpt_catalog) -> usize;
    pub fn ckpt_catalog_file_path(catalog: *const ckpt_catalog, i: usize) -> *const c_char;
    pub fn ckpt_catalog_file_size(catalog: *const ckpt_catalog, i: usize) -> u64;
    pub fn ckpt_catalog_index_path(catalog: *const ckpt_catalog) -> *const c_char;
    pub fn ckpt_catalog_tree_json(catalog: *const ckpt_catalog) -> *const c_char;
    pub fn ckpt_catalog_tree(catalog: *const ckpt_catalog) -> *const ckpt_value;
    pub fn ckpt_plan_tree(plan: *mut ckpt_plan, tree: *mut *const ckpt_value, err: *mut ckpt_error) -> ckpt_status;
    pub fn ckpt_value_kind_of(value: *const ckpt_value) -> ckpt_value_kind;
    pub fn ckpt_value_bool(value: *const ckpt_value) -> c_int;
    pub fn ckpt_value_int(value: *const ckpt_value) -> i64;
    pub fn ckpt_value_float(value: *const ckpt_value) -> f64;
    pub fn ckpt_value_text(value: *const ckpt_value, len: *mut usize) -> *const c_char;
    pub fn ckpt_value_len(value: *const ckpt_value) -> usize;
    pub fn ckpt_value_item(value: *const ckpt_value, i: usize) -> *const ckpt_value;
    pub fn ckpt_value_key(value: *const ckpt_value, i: usize) -> *const ckpt_value;
    pub fn ckpt_value_at(value: *const ckpt_value, i: usize) -> *const ckpt_value;
    pub fn ckpt_value_class(value: *const ckpt_value) -> *const c_char;
    pub fn ckpt_value_state(value: *const ckpt_value) -> *const ckpt_value;
    pub fn ckpt_catalog_file_metadata(catalog: *const ckpt_catalog, file: usize, key: *const c_char) -> *const c_char;
    pub fn ckpt_catalog_metadata_count(catalog: *const ckpt_catalog) -> usize;
    pub fn ckpt_catalog_metadata_entry(
        catalog: *const ckpt_catalog,
        i: usize,
        key: *mut *const c_char,
        value: *mut *const c_char,
    ) -> ckpt_status;
    pub fn ckpt_catalog_metadata_get(catalog: *const ckpt_catalog, key: *const c_char) -> *const c_char;
    pub fn ckpt_catalog_read(
        catalog: *const ckpt_catalog,
        tensor: *const ckpt_tensor_info,
        byte_offset: u64,
        dst: *mut c_void,
        nbytes: u64,
        err: *mut ckpt_error,
    ) -> ckpt_status;
    pub fn ckpt_catalog_view(
        catalog: *mut ckpt_catalog,
        tensor: *const ckpt_tensor_info,
        data: *mut *const c_void,
        err: *mut ckpt_error,
    ) -> ckpt_status;

    pub fn ckpt_parse_size(text: *const c_char, bytes: *mut u64, err: *mut ckpt_error) -> ckpt_status;

    /// Fills the first `size` bytes (the caller's `size_of`) with the defaults.
    pub fn ckpt_writer_options_init_sized(options: *mut ckpt_writer_options, size: usize);
    pub fn ckpt_writer_create(
        path: *const c_char,
        options: *const ckpt_writer_options,
        out: *mut *mut ckpt_writer,
        err: *mut ckpt_error,
    ) -> ckpt_status;
    pub fn ckpt_writer_set_metadata(
        writer: *mut ckpt_writer,
        key: *const c_char,
        value: *const c_char,
        err: *mut ckpt_error,
    ) -> ckpt_status;
    pub fn ckpt_writer_set_checkpoint_metadata(
        writer: *mut ckpt_writer,
        key: *const c_char,
        value: *const c_char,
        err: *mut ckpt_error,
    ) -> ckpt_status;
    pub fn ckpt_writer_add_tensor(
        writer: *mut ckpt_writer,
        name: *const c_char,
        dtype: ckpt_dtype,
        ndim: u32,
        shape: *const u64,
        index: *mut usize,
        err: *mut ckpt_error,
    ) -> ckpt_status;
    pub fn ckpt_writer_add_tensor_shared(
        writer: *mut ckpt_writer,
        name: *const c_char,
        dtype: ckpt_dtype,
        ndim: u32,
        shape: *const u64,
        storage: *const ckpt_tensor_storage,
        index: *mut usize,
        err: *mut ckpt_error,
    ) -> ckpt_status;
    pub fn ckpt_writer_tensor_kept(writer: *const ckpt_writer, index: usize) -> *const c_char;
    pub fn ckpt_writer_begin(writer: *mut ckpt_writer, err: *mut ckpt_error) -> ckpt_status;
    pub fn ckpt_writer_file_count(writer: *const ckpt_writer) -> usize;
    pub fn ckpt_writer_file_path(writer: *const ckpt_writer, i: usize) -> *const c_char;
    pub fn ckpt_writer_tensor_file(writer: *const ckpt_writer, index: usize) -> usize;
    pub fn ckpt_writer_total_bytes(writer: *const ckpt_writer) -> u64;
    pub fn ckpt_writer_write(
        writer: *mut ckpt_writer,
        index: usize,
        data: *const c_void,
        nbytes: usize,
        err: *mut ckpt_error,
    ) -> ckpt_status;
    pub fn ckpt_writer_commit(writer: *mut ckpt_writer, err: *mut ckpt_error) -> ckpt_status;
    pub fn ckpt_writer_published_count(writer: *const ckpt_writer) -> usize;
    pub fn ckpt_writer_published_path(writer: *const ckpt_writer, i: usize) -> *const c_char;
    pub fn ckpt_writer_free(writer: *mut ckpt_writer);
    /// Finishes a commit into `dir` that a crash cut short; `*found`: there was one.
    pub fn ckpt_commit_recover(dir: *const c_char, flags: c_uint, found: *mut c_int, err: *mut ckpt_error) -> ckpt_status;
    /// The destination rule: the format and shape (file or directory) written at `path`.
    pub fn ckpt_destination_resolve(
        path: *const c_char,
        options: *const ckpt_writer_options,
        format: *mut ckpt_format,
        directory: *mut c_int,
        err: *mut ckpt_error,
    ) -> ckpt_status;

    pub static ckpt_memory_source_ops: ckpt_source_ops;
    pub fn ckpt_catalog_open_source(
        ops: *const ckpt_source_ops,
        user: *mut c_void,
        name: *const c_char,
        options: *const ckpt_catalog_options,
        out: *mut *mut ckpt_catalog,
        err: *mut ckpt_error,
    ) -> ckpt_status;
    pub fn ckpt_verify_options_init_sized(options: *mut ckpt_verify_options, size: usize);
    pub fn ckpt_verify(
        catalog: *const ckpt_catalog,
        options: *const ckpt_verify_options,
        report: *mut ckpt_verify_report,
        err: *mut ckpt_error,
    ) -> ckpt_status;

    pub fn ckpt_can_cast(from: ckpt_dtype, to: ckpt_dtype) -> c_int;
    pub fn ckpt_cast(
        from: ckpt_dtype,
        src: *const c_void,
        to: ckpt_dtype,
        dst: *mut c_void,
        count: u64,
        err: *mut ckpt_error,
    ) -> ckpt_status;

    pub fn ckpt_plan_create(catalog: *mut ckpt_catalog, out: *mut *mut ckpt_plan, err: *mut ckpt_error) -> ckpt_status;
    pub fn ckpt_plan_free(plan: *mut ckpt_plan);
    pub fn ckpt_plan_select(plan: *mut ckpt_plan, pattern: *const c_char, err: *mut ckpt_error) -> ckpt_status;
    pub fn ckpt_plan_exclude(plan: *mut ckpt_plan, pattern: *const c_char, err: *mut ckpt_error) -> ckpt_status;
    pub fn ckpt_plan_rename(
        plan: *mut ckpt_plan,
        from: *const c_char,
        to: *const c_char,
        err: *mut ckpt_error,
    ) -> ckpt_status;
    pub fn ckpt_plan_cast(
        plan: *mut ckpt_plan,
        pattern: *const c_char,
        dtype: ckpt_dtype,
        err: *mut ckpt_error,
    ) -> ckpt_status;
    pub fn ckpt_plan_slice(
        plan: *mut ckpt_plan,
        pattern: *const c_char,
        dim: c_int,
        start: u64,
        stop: u64,
        err: *mut ckpt_error,
    ) -> ckpt_status;
    pub fn ckpt_plan_split(
        plan: *mut ckpt_plan,
        pattern: *const c_char,
        dim: c_int,
        rank: u64,
        parts: u64,
        err: *mut ckpt_error,
    ) -> ckpt_status;
    pub fn ckpt_plan_permute(
        plan: *mut ckpt_plan,
        pattern: *const c_char,
        ndim: u32,
        perm: *const u32,
        err: *mut ckpt_error,
    ) -> ckpt_status;
    pub fn ckpt_plan_transpose(plan: *mut ckpt_plan, pattern: *const c_char, err: *mut ckpt_error) -> ckpt_status;
    pub fn ckpt_plan_layout(
        plan: *mut ckpt_plan,
        pattern: *const c_char,
        from: *const c_char,
        to: *const c_char,
        err: *mut ckpt_error,
    ) -> ckpt_status;
    pub fn ckpt_plan_count(plan: *const ckpt_plan) -> usize;
    pub fn ckpt_plan_item_at(plan: *const ckpt_plan, i: usize) -> *const ckpt_plan_item;
    pub fn ckpt_plan_find(plan: *const ckpt_plan, name: *const c_char, index: *mut usize) -> *const ckpt_plan_item;
    pub fn ckpt_plan_set_buffer(
        plan: *mut ckpt_plan,
        i: usize,
        buffer: *mut c_void,
        capacity: u64,
        err: *mut ckpt_error,
    ) -> ckpt_status;
    pub fn ckpt_plan_take(plan: *mut ckpt_plan, i: usize) -> *mut c_void;
    pub fn ckpt_free(buffer: *mut c_void);
    pub fn ckpt_plan_match(
        plan: *mut ckpt_plan,
        expected: *const ckpt_expected,
        expected_count: usize,
        flags: c_uint,
        entries: *mut *const ckpt_match_entry,
        count: *mut usize,
        err: *mut ckpt_error,
    ) -> ckpt_status;

    /// Fills the first `size` bytes (the caller's `size_of`) with the defaults.
    pub fn ckpt_load_options_init_sized(options: *mut ckpt_load_options, size: usize);
    pub fn ckpt_load(plan: *mut ckpt_plan, options: *const ckpt_load_options, err: *mut ckpt_error) -> ckpt_status;
    pub fn ckpt_plan_stats(plan: *const ckpt_plan, stats: *mut ckpt_load_stats);
    pub fn ckpt_convert_plan(
        plan: *mut ckpt_plan,
        dst_path: *const c_char,
        options: *const ckpt_writer_options,
        err: *mut ckpt_error,
    ) -> ckpt_status;
}

#[cfg(test)]
mod layout {
    //! The declarations above against the C compiler's view of ckpt.h
    //! (layout.c, compiled by build.rs).  A failure here means ckpt.h
    //! changed: update the declarations in this file.
    use super::*;
    use std::mem::{size_of, MaybeUninit};

    extern "C" {
        fn ckpt_sys_layout_count() -> usize;
        fn ckpt_sys_layout(i: usize) -> usize;
    }

    macro_rules! off {
        ($t:ty, $f:ident) => {{
            let u = MaybeUninit::<$t>::uninit();
            let base = u.as_ptr();
            // SAFETY: addr_of! on a field of an uninitialised value reads nothing.
            unsafe { (std::ptr::addr_of!((*base).$f) as *const u8).offset_from(base as *const u8) as usize }
        }};
    }

    #[test]
    fn declarations_match_the_header() {
        // (what, value in Rust, exact?) — `exact == false`: the C value may
        // be smaller (a library struct that Reserved<> leaves room to grow).
        let rust: Vec<(&str, usize, bool)> = vec![
            ("sizeof ckpt_error", size_of::<ckpt_error>(), true),
            ("ckpt_error.status", off!(ckpt_error, status), true),
            ("ckpt_error.sys_errno", off!(ckpt_error, sys_errno), true),
            ("ckpt_error.offset", off!(ckpt_error, offset), true),
            ("ckpt_error.path", off!(ckpt_error, path), true),
            ("ckpt_error.tensor", off!(ckpt_error, tensor), true),
            ("ckpt_error.message", off!(ckpt_error, message), true),
            ("ckpt_tensor_info.name", off!(ckpt_tensor_info, name), true),
            ("ckpt_tensor_info.dtype", off!(ckpt_tensor_info, dtype), true),
            ("ckpt_tensor_info.ndim", off!(ckpt_tensor_info, ndim), true),
            ("ckpt_tensor_info.shape", off!(ckpt_tensor_info, shape), true),
            ("ckpt_tensor_info.numel", off!(ckpt_tensor_info, numel), true),
            ("ckpt_tensor_info.nbytes", off!(ckpt_tensor_info, nbytes), true),
            ("ckpt_tensor_info.file", off!(ckpt_tensor_info, file), true),
            ("ckpt_tensor_info.offset", off!(ckpt_tensor_info, offset), true),
            ("ckpt_tensor_info.strides", off!(ckpt_tensor_info, strides), true),
            ("ckpt_tensor_info.storage", off!(ckpt_tensor_info, storage), true),
            ("ckpt_tensor_info.big_endian", off!(ckpt_tensor_info, big_endian), true),
            ("ckpt_tensor_info.compressed", off!(ckpt_tensor_info, compressed), true),
            ("ckpt_plan_item.name", off!(ckpt_plan_item, name), true),
            ("ckpt_plan_item.source", off!(ckpt_plan_item, source), true),
            ("ckpt_plan_item.dtype", off!(ckpt_plan_item, dtype), true),
            ("ckpt_plan_item.ndim", off!(ckpt_plan_item, ndim), true),
            ("ckpt_plan_item.shape", off!(ckpt_plan_item, shape), true),
            ("ckpt_plan_item.numel", off!(ckpt_plan_item, numel), true),
            ("ckpt_plan_item.nbytes", off!(ckpt_plan_item, nbytes), true),
            ("ckpt_plan_item.slice_start", off!(ckpt_plan_item, slice_start), true),
            ("ckpt_plan_item.slice_count", off!(ckpt_plan_item, slice_count), true),
            ("ckpt_plan_item.perm", off!(ckpt_plan_item, perm), true),
            ("ckpt_plan_item.data", off!(ckpt_plan_item, data), true),
            ("ckpt_plan_item.is_view", off!(ckpt_plan_item, is_view), true),
            ("ckpt_plan_item.transform", off!(ckpt_plan_item, transform), true),
            ("sizeof ckpt_catalog_options", size_of::<Reserved<ckpt_catalog_options>>(), false),
            ("ckpt_catalog_options.size", off!(ckpt_catalog_options, size), true),
            ("ckpt_catalog_options.allowed_globals", off!(ckpt_catalog_options, allowed_globals), true),
            ("ckpt_catalog_options.allowed_global_count", off!(ckpt_catalog_options, allowed_global_count), true),
            ("sizeof ckpt_writer_options", size_of::<Reserved<ckpt_writer_options>>(), false),
            ("ckpt_writer_options.size", off!(ckpt_writer_options, size), true),
            ("ckpt_writer_options.max_shard_size", off!(ckpt_writer_options, max_shard_size), true),
            ("ckpt_writer_options.prefix", off!(ckpt_writer_options, prefix), true),
            ("ckpt_writer_options.overwrite", off!(ckpt_writer_options, overwrite), true),
            ("ckpt_writer_options.no_sync", off!(ckpt_writer_options, no_sync), true),
            ("ckpt_writer_options.checksums", off!(ckpt_writer_options, checksums), true),
            ("ckpt_writer_options.copy_partial_views", off!(ckpt_writer_options, copy_partial_views), true),
            ("ckpt_writer_options.format", off!(ckpt_writer_options, format), true),
            ("ckpt_writer_options.copy_files_from", off!(ckpt_writer_options, copy_files_from), true),
            ("ckpt_writer_options.gguf", off!(ckpt_writer_options, gguf), true),
            ("ckpt_writer_options.metadata_json", off!(ckpt_writer_options, metadata_json), true),
            ("ckpt_writer_options.dcp", off!(ckpt_writer_options, dcp), true),
            ("ckpt_writer_options.dry_run", off!(ckpt_writer_options, dry_run), true),
            ("ckpt_writer_options.total_parameters", off!(ckpt_writer_options, total_parameters), true),
            ("ckpt_writer_options.skip_crc_check", off!(ckpt_writer_options, skip_crc_check), true),
            ("ckpt_writer_options.source_metadata", off!(ckpt_writer_options, source_metadata), true),
            ("ckpt_writer_options.exact_file", off!(ckpt_writer_options, exact_file), true),
            ("ckpt_writer_options.progress", off!(ckpt_writer_options, progress), true),
            ("ckpt_writer_options.user", off!(ckpt_writer_options, user), true),
            ("sizeof ckpt_memory_source", size_of::<ckpt_memory_source>(), true),
            ("ckpt_memory_source.size", off!(ckpt_memory_source, size), true),
            ("sizeof ckpt_verify_options", size_of::<ckpt_verify_options>(), true),
            ("ckpt_verify_options.progress", off!(ckpt_verify_options, progress), true),
            ("ckpt_verify_options.user", off!(ckpt_verify_options, user), true),
            ("sizeof ckpt_verify_report", size_of::<ckpt_verify_report>(), true),
            ("ckpt_verify_report.tensor_digests", off!(ckpt_verify_report, tensor_digests), true),
            ("ckpt_verify_report.tensors", off!(ckpt_verify_report, tensors), true),
            ("sizeof ckpt_gguf_writer_options", size_of::<ckpt_gguf_writer_options>(), true),
            ("ckpt_gguf_writer_options.split_max_tensors", off!(ckpt_gguf_writer_options, split_max_tensors), true),
            ("sizeof ckpt_dcp_writer_options", size_of::<ckpt_dcp_writer_options>(), true),
            ("ckpt_dcp_writer_options.ranks", off!(ckpt_dcp_writer_options, ranks), true),
            ("sizeof ckpt_tensor_storage", size_of::<ckpt_tensor_storage>(), true),
            ("ckpt_tensor_storage.id", off!(ckpt_tensor_storage, id), true),
            ("ckpt_tensor_storage.nbytes", off!(ckpt_tensor_storage, nbytes), true),
            ("ckpt_tensor_storage.begin", off!(ckpt_tensor_storage, begin), true),
            ("ckpt_tensor_storage.end", off!(ckpt_tensor_storage, end), true),
            ("ckpt_tensor_storage.contiguous", off!(ckpt_tensor_storage, contiguous), true),
            ("sizeof ckpt_load_options", size_of::<Reserved<ckpt_load_options>>(), false),
            ("ckpt_load_options.size", off!(ckpt_load_options, size), true),
            ("ckpt_load_options.threads", off!(ckpt_load_options, threads), true),
            ("ckpt_load_options.chunk_bytes", off!(ckpt_load_options, chunk_bytes), true),
            ("ckpt_load_options.io", off!(ckpt_load_options, io), true),
            ("ckpt_load_options.io_uring", off!(ckpt_load_options, io_uring), true),
            ("ckpt_load_options.views", off!(ckpt_load_options, views), true),
            ("ckpt_load_options.progress", off!(ckpt_load_options, progress), true),
            ("ckpt_load_options.user", off!(ckpt_load_options, user), true),
            ("ckpt_load_options.item_done", off!(ckpt_load_options, item_done), true),
            ("ckpt_load_options.item_done_user", off!(ckpt_load_options, item_done_user), true),
            ("ckpt_load_options.skip_crc_check", off!(ckpt_load_options, skip_crc_check), true),
            ("sizeof ckpt_load_stats", size_of::<Reserved<ckpt_load_stats>>(), false),
            ("ckpt_load_stats.bytes_needed", off!(ckpt_load_stats, bytes_needed), true),
            ("ckpt_load_stats.bytes_read", off!(ckpt_load_stats, bytes_read), true),
            ("ckpt_load_stats.reads", off!(ckpt_load_stats, reads), true),
            ("ckpt_load_stats.tasks", off!(ckpt_load_stats, tasks), true),
            ("ckpt_load_stats.threads", off!(ckpt_load_stats, threads), true),
            ("ckpt_load_stats.ring_bytes", off!(ckpt_load_stats, ring_bytes), true),
            ("ckpt_load_stats.direct", off!(ckpt_load_stats, direct), true),
            ("ckpt_load_stats.io_uring", off!(ckpt_load_stats, io_uring), true),
            ("ckpt_load_stats.views", off!(ckpt_load_stats, views), true),
            ("sizeof ckpt_expected", size_of::<ckpt_expected>(), true),
            ("ckpt_expected.name", off!(ckpt_expected, name), true),
            ("ckpt_expected.dtype", off!(ckpt_expected, dtype), true),
            ("ckpt_expected.ndim", off!(ckpt_expected, ndim), true),
            ("ckpt_expected.shape", off!(ckpt_expected, shape), true),
            ("ckpt_match_entry.kind", off!(ckpt_match_entry, kind), true),
            ("ckpt_match_entry.name", off!(ckpt_match_entry, name), true),
            ("ckpt_match_entry.expected", off!(ckpt_match_entry, expected), true),
            ("ckpt_match_entry.item", off!(ckpt_match_entry, item), true),
            ("sizeof ckpt_status", size_of::<ckpt_status>(), true),
            ("sizeof ckpt_dtype", size_of::<ckpt_dtype>(), true),
            ("sizeof ckpt_format", size_of::<ckpt_format>(), true),
            ("sizeof ckpt_io_mode", size_of::<ckpt_io_mode>(), true),
            ("CKPT_DTYPE_COUNT", CKPT_DTYPE_COUNT as usize, true),
            ("CKPT_MAX_DIMS", CKPT_MAX_DIMS as usize, true),
            ("sizeof ckpt_value_kind", size_of::<ckpt_value_kind>(), true),
            ("CKPT_VALUE_NULL", CKPT_VALUE_NULL as usize, true),
            ("CKPT_VALUE_BOOL", CKPT_VALUE_BOOL as usize, true),
            ("CKPT_VALUE_INT", CKPT_VALUE_INT as usize, true),
            ("CKPT_VALUE_FLOAT", CKPT_VALUE_FLOAT as usize, true),
            ("CKPT_VALUE_NUMBER", CKPT_VALUE_NUMBER as usize, true),
            ("CKPT_VALUE_STRING", CKPT_VALUE_STRING as usize, true),
            ("CKPT_VALUE_BYTES", CKPT_VALUE_BYTES as usize, true),
            ("CKPT_VALUE_BIGINT", CKPT_VALUE_BIGINT as usize, true),
            ("CKPT_VALUE_TENSOR", CKPT_VALUE_TENSOR as usize, true),
            ("CKPT_VALUE_GLOBAL", CKPT_VALUE_GLOBAL as usize, true),
            ("CKPT_VALUE_LIST", CKPT_VALUE_LIST as usize, true),
            ("CKPT_VALUE_TUPLE", CKPT_VALUE_TUPLE as usize, true),
            ("CKPT_VALUE_SET", CKPT_VALUE_SET as usize, true),
            ("CKPT_VALUE_CALL", CKPT_VALUE_CALL as usize, true),
            ("CKPT_VALUE_DICT", CKPT_VALUE_DICT as usize, true),
            ("CKPT_VALUE_OBJECT", CKPT_VALUE_OBJECT as usize, true),
        ];
        let n = unsafe { ckpt_sys_layout_count() };
        assert_eq!(n, rust.len(), "layout.c and this test list different fields");
        let mut bad = Vec::new();
        for (i, (what, r, exact)) in rust.iter().enumerate() {
            let c = unsafe { ckpt_sys_layout(i) };
            if (*exact && c != *r) || (!*exact && c > *r) {
                bad.push(format!("{}: C {} vs Rust {}", what, c, r));
            }
        }
        assert!(bad.is_empty(), "ckpt.h changed; update ckpt-sys/src/lib.rs:\n{}", bad.join("\n"));
    }

    #[test]
    fn links_and_reports_its_version() {
        let v = unsafe { std::ffi::CStr::from_ptr(ckpt_version()) };
        assert!(v.to_str().unwrap().starts_with("0."));
        let name = unsafe { std::ffi::CStr::from_ptr(ckpt_status_name(CKPT_E_DATA_HOLE)) };
        assert_eq!(name.to_str().unwrap(), "CKPT_E_DATA_HOLE");
    }
}
