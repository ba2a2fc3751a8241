//! Reads HotSpot's serviceability tables (`gHotSpotVMStructs`, `gHotSpotVMTypes`): where the
//! heap is reserved and the values of VM flags, without a patched JVM.
//!
//! The tables are arrays of entries whose layout HotSpot itself describes through exported
//! `...Offset` and `...ArrayStride` symbols; an entry with a null type name ends each array.
//! These are the same tables the serviceability agent (jhsdb) uses, stable since JDK 6.

#![allow(unsafe_code)]

use std::ffi::{c_char, c_void, CStr};

/// Where the Java heap is reserved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReservedHeap {
    pub start: usize,
    pub bytes: usize,
}

/// Who set a VM flag's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlagOrigin {
    /// HotSpot's default.
    Default,
    /// HotSpot's ergonomics, from the machine and the other flags.
    Ergonomic,
    /// The command line, an environment variable, a flags file, management or an agent.
    User,
}

/// An integer the VM stores at `at`, `width` (2, 4 or 8) bytes wide, little-endian.
#[derive(Clone, Copy, Debug)]
struct IntField {
    at: usize,
    width: usize,
}

impl IntField {
    /// Reads it, zero-extended.
    fn read(self) -> u64 {
        // SAFETY: built only from the VM's own descriptions of a flag's storage or fields,
        // which live as long as libjvm; `width` is one the VM states for it.
        unsafe {
            match self.width {
                2 => u64::from(*(self.at as *const u16)),
                4 => u64::from(*(self.at as *const u32)),
                _ => *(self.at as *const u64),
            }
        }
    }

    /// Writes the low `width` bytes of `v`.
    ///
    /// # Safety
    /// Nothing else may read or write it meanwhile (see `set_flag_uint_ergonomic`).
    unsafe fn write(self, v: u64) {
        // SAFETY: as `read`; exclusive by the caller's contract.
        unsafe {
            match self.width {
                2 => *(self.at as *mut u16) = v as u16,
                4 => *(self.at as *mut u32) = v as u32,
                _ => *(self.at as *mut u64) = v,
            }
        }
    }
}

/// The exported tables of a running HotSpot.
#[derive(Debug)]
pub struct VmStructs {
    fields: Vec<Field>,
    types: Vec<TypeEntry>,
    /// `gHotSpotVMIntConstants`: enum values such as region type tags.
    int_constants: Vec<(String, i32)>,
}

#[derive(Debug, Clone)]
struct Field {
    type_name: String,
    field_name: String,
    is_static: bool,
    offset: u64,
    address: usize,
}

#[derive(Debug, Clone)]
struct TypeEntry {
    name: String,
    size: u64,
}

fn sym(handle: *mut c_void, name: &CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym with a valid handle (or RTLD_DEFAULT) and a NUL-terminated name.
    let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

/// Reads a `uint64_t` or pointer-sized exported variable.
fn sym_u64(handle: *mut c_void, name: &CStr) -> Option<u64> {
    // SAFETY: HotSpot exports these offsets/strides as `uint64_t` variables.
    sym(handle, name).map(|p| unsafe { *(p as *const u64) })
}

fn sym_ptr(handle: *mut c_void, name: &CStr) -> Option<usize> {
    // SAFETY: HotSpot exports the table heads as pointer variables.
    sym(handle, name).map(|p| unsafe { *(p as *const usize) })
}

/// libjvm.so's handle: the global namespace when the launcher loaded it RTLD_GLOBAL, else
/// the library found through /proc/self/maps, opened without loading it again.
fn libjvm() -> Option<*mut c_void> {
    if sym(libc::RTLD_DEFAULT, c"gHotSpotVMStructs").is_some() {
        return Some(libc::RTLD_DEFAULT);
    }
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let path = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.ends_with("/libjvm.so"))?;
    let c = std::ffi::CString::new(path).ok()?;
    // SAFETY: RTLD_NOLOAD only returns a handle to an already loaded library.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    (!h.is_null()).then_some(h)
}

/// Reads a C string at `p` (null gives an empty string).
///
/// # Safety
/// `p` must be null or point to a NUL-terminated string.
unsafe fn c_str(p: usize) -> String {
    if p == 0 {
        return String::new();
    }
    // SAFETY: the caller guarantees a NUL-terminated string.
    unsafe { CStr::from_ptr(p as *const c_char) }
        .to_string_lossy()
        .into_owned()
}

impl VmStructs {
    /// Reads both tables; `Err` says what is missing (not a HotSpot VM, or stripped).
    pub fn load() -> Result<VmStructs, String> {
        let h = libjvm().ok_or("libjvm.so does not export gHotSpotVMStructs")?;
        let need = |n: &CStr| {
            sym_u64(h, n)
                .ok_or_else(|| format!("libjvm.so does not export {}", n.to_string_lossy()))
        };
        let structs = sym_ptr(h, c"gHotSpotVMStructs").ok_or("no gHotSpotVMStructs")?;
        let (s_type, s_field, s_static, s_offset, s_address, s_stride) = (
            need(c"gHotSpotVMStructEntryTypeNameOffset")? as usize,
            need(c"gHotSpotVMStructEntryFieldNameOffset")? as usize,
            need(c"gHotSpotVMStructEntryIsStaticOffset")? as usize,
            need(c"gHotSpotVMStructEntryOffsetOffset")? as usize,
            need(c"gHotSpotVMStructEntryAddressOffset")? as usize,
            need(c"gHotSpotVMStructEntryArrayStride")? as usize,
        );
        let types = sym_ptr(h, c"gHotSpotVMTypes").ok_or("no gHotSpotVMTypes")?;
        let (t_name, t_size, t_stride) = (
            need(c"gHotSpotVMTypeEntryTypeNameOffset")? as usize,
            need(c"gHotSpotVMTypeEntrySizeOffset")? as usize,
            need(c"gHotSpotVMTypeEntryArrayStride")? as usize,
        );
        let mut fields = Vec::new();
        let mut e = structs;
        // SAFETY: the entries and their strings live in libjvm's data for the life of the
        // process; offsets and strides come from the same VM. The array ends with a null
        // type name.
        unsafe {
            loop {
                let tn = *((e + s_type) as *const usize);
                if tn == 0 {
                    break;
                }
                fields.push(Field {
                    type_name: c_str(tn),
                    field_name: c_str(*((e + s_field) as *const usize)),
                    is_static: *((e + s_static) as *const i32) != 0,
                    offset: *((e + s_offset) as *const u64),
                    address: *((e + s_address) as *const usize),
                });
                e += s_stride;
            }
        }
        let mut type_list = Vec::new();
        let mut e = types;
        // SAFETY: as above, for the types table.
        unsafe {
            loop {
                let tn = *((e + t_name) as *const usize);
                if tn == 0 {
                    break;
                }
                type_list.push(TypeEntry {
                    name: c_str(tn),
                    size: *((e + t_size) as *const u64),
                });
                e += t_stride;
            }
        }
        let mut int_constants = Vec::new();
        if let (Some(mut e), Ok(c_name), Ok(c_value), Ok(c_stride)) = (
            sym_ptr(h, c"gHotSpotVMIntConstants"),
            need(c"gHotSpotVMIntConstantEntryNameOffset"),
            need(c"gHotSpotVMIntConstantEntryValueOffset"),
            need(c"gHotSpotVMIntConstantEntryArrayStride"),
        ) {
            // SAFETY: as above, for the int constants table (a null name ends it).
            unsafe {
                loop {
                    let n = *((e + c_name as usize) as *const usize);
                    if n == 0 {
                        break;
                    }
                    int_constants.push((c_str(n), *((e + c_value as usize) as *const i32)));
                    e += c_stride as usize;
                }
            }
        }
        Ok(VmStructs {
            fields,
            types: type_list,
            int_constants,
        })
    }

    fn field(&self, ty: &str, name: &str) -> Result<&Field, String> {
        self.fields
            .iter()
            .find(|f| f.type_name == ty && f.field_name == name)
            .ok_or_else(|| format!("the VM does not describe {ty}::{name}"))
    }

    /// The offset of the first of `names` ((type, field), e.g. a JDK 17 name and its JDK 21+
    /// rename) that the VM describes.
    pub fn offset_of(&self, names: &[(&str, &str)]) -> Result<usize, String> {
        first_ok(names, |(t, f)| self.offset(t, f))
    }

    /// The address of the first of `names` that is a static field the VM describes.
    pub fn static_address_of(&self, names: &[(&str, &str)]) -> Result<usize, String> {
        first_ok(names, |(t, f)| self.static_address(t, f))
    }

    /// The value of the first of `names` that is an int constant the VM describes.
    pub fn int_constant(&self, names: &[&str]) -> Result<i32, String> {
        first_ok(names, |n| {
            self.int_constants
                .iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| *v)
                .ok_or_else(|| format!("the VM does not describe the constant {n}"))
        })
    }

    fn offset(&self, ty: &str, name: &str) -> Result<usize, String> {
        let f = self.field(ty, name)?;
        if f.is_static {
            return Err(format!("{ty}::{name} is static"));
        }
        Ok(f.offset as usize)
    }

    fn static_address(&self, ty: &str, name: &str) -> Result<usize, String> {
        let f = self.field(ty, name)?;
        if !f.is_static || f.address == 0 {
            return Err(format!("{ty}::{name} has no static address"));
        }
        Ok(f.address)
    }

    fn type_size(&self, ty: &str) -> Result<usize, String> {
        self.types
            .iter()
            .find(|t| t.name == ty)
            .map(|t| t.size as usize)
            .ok_or_else(|| format!("the VM does not describe type {ty}"))
    }

    /// `Universe::_collectedHeap`: the heap object. Valid from VMInit on.
    pub fn collected_heap(&self) -> Result<usize, String> {
        let slot = self.static_address("Universe", "_collectedHeap")?;
        // SAFETY: the VM describes this static pointer; it is set before VMInit.
        let heap = unsafe { *(slot as *const usize) };
        if heap == 0 {
            return Err("the heap is not initialised yet".into());
        }
        Ok(heap)
    }

    /// `Universe::_collectedHeap->_reserved`: the whole reserved heap. Valid from VMInit on.
    pub fn reserved_heap(&self) -> Result<ReservedHeap, String> {
        let heap_slot = self.static_address("Universe", "_collectedHeap")?;
        let reserved = self.offset("CollectedHeap", "_reserved")?;
        let start_off = self.offset("MemRegion", "_start")?;
        let words_off = self.offset("MemRegion", "_word_size")?;
        // SAFETY: addresses and offsets come from the VM's own description of these fields;
        // the heap object lives for the life of the VM.
        unsafe {
            let heap = *(heap_slot as *const usize);
            if heap == 0 {
                return Err("the heap is not initialised yet".into());
            }
            let region = heap + reserved;
            let start = *((region + start_off) as *const usize);
            let words = *((region + words_off) as *const usize);
            Ok(ReservedHeap {
                start,
                bytes: words * std::mem::size_of::<usize>(),
            })
        }
    }

    /// The flag table's entry of `name`: the address of its `JVMFlag`.
    fn flag_entry(&self, name: &str) -> Result<usize, String> {
        let flags = self.static_address("JVMFlag", "flags")?;
        let num = self.static_address("JVMFlag", "numFlags")?;
        let name_off = self.offset("JVMFlag", "_name")?;
        let stride = self.type_size("JVMFlag")?;
        // SAFETY: the flag table is a static array of `numFlags` JVMFlag entries described by
        // the VM itself; names are C strings in libjvm.
        unsafe {
            let base = *(flags as *const usize);
            let n = *(num as *const usize);
            for i in 0..n {
                let e = base + i * stride;
                let np = *((e + name_off) as *const usize);
                if np != 0 && CStr::from_ptr(np as *const c_char).to_bytes() == name.as_bytes() {
                    return Ok(e);
                }
            }
        }
        Err(format!("the VM has no flag {name}"))
    }

    /// Where the value of a VM flag is stored (`bool`, `uint`, `size_t`, `intx`, `uintx`).
    fn flag_addr(&self, name: &str) -> Result<usize, String> {
        self.value_addr(self.flag_entry(name)?)
    }

    /// Where the value of the flag at table entry `e` is stored.
    fn value_addr(&self, e: usize) -> Result<usize, String> {
        let addr_off = self.offset("JVMFlag", "_addr")?;
        // SAFETY: `e` is a JVMFlag entry of the VM's table; `_addr` points at the flag's global.
        Ok(unsafe { *((e + addr_off) as *const usize) })
    }

    /// Where a flag's value came from (`JVMFlag::_flags`): whether anyone but HotSpot's
    /// defaults set it.
    pub fn flag_origin(&self, name: &str) -> Result<FlagOrigin, String> {
        let bits = self.bits_field(self.flag_entry(name)?)?.read() as u32;
        let mask = self.int_constant(&["JVMFlag::VALUE_ORIGIN_MASK"])? as u32;
        let default = self.int_constant(&["JVMFlagOrigin::DEFAULT"])? as u32;
        let ergonomic = self.int_constant(&["JVMFlagOrigin::ERGONOMIC"])? as u32;
        let on_command_line = self
            .int_constant(&["JVMFlag::WAS_SET_ON_COMMAND_LINE"])
            .is_ok_and(|b| bits & b as u32 != 0);
        Ok(match bits & mask {
            _ if on_command_line => FlagOrigin::User,
            o if o == default => FlagOrigin::Default,
            o if o == ergonomic => FlagOrigin::Ergonomic,
            _ => FlagOrigin::User,
        })
    }

    /// The `JVMFlag::_flags` field of table entry `e` (a 4-byte enum in JDK 17, the width the
    /// VM states elsewhere).
    fn bits_field(&self, e: usize) -> Result<IntField, String> {
        let off = self.offset("JVMFlag", "_flags")?;
        let width = self.type_size("JVMFlag::Flags").unwrap_or(4);
        if width != 2 && width != 4 {
            return Err(format!("JVMFlag::_flags is {width} bytes wide"));
        }
        Ok(IntField { at: e + off, width })
    }

    /// The storage of the integer flag `name` at table entry `e` (`uint`, `uintx`, `size_t`,
    /// ...), its width from `JVMFlag::_type`: an index into HotSpot's list of flag types, in
    /// the order the serviceability agent also relies on (`bool int uint intx uintx uint64_t
    /// size_t double ccstr ccstrlist`). G1's percentages are `uintx` in JDK 17 and `uint` in
    /// JDK 25.
    fn int_flag(&self, e: usize, name: &str) -> Result<IntField, String> {
        let off = self.offset("JVMFlag", "_type")?;
        // SAFETY: `_type` is an int field of a JVMFlag entry.
        let ty = unsafe { *((e + off) as *const i32) };
        let width = match ty {
            1 | 2 => 4,
            3..=6 => 8,
            _ => return Err(format!("{name} is not an integer flag (type {ty})")),
        };
        Ok(IntField {
            at: self.value_addr(e)?,
            width,
        })
    }

    /// The value of an unsigned integer flag of either width.
    pub fn flag_uint(&self, name: &str) -> Result<u64, String> {
        Ok(self.int_flag(self.flag_entry(name)?, name)?.read())
    }

    /// Sets an unsigned integer flag as HotSpot's own ergonomics would (`FLAG_SET_ERGO`: the
    /// value, and its origin for `-XX:+PrintFlagsFinal`).
    ///
    /// # Safety
    /// Only while the VM is still starting and reads the flag later, single-threaded: from
    /// `Agent_OnLoad`, before the heap is made.
    pub unsafe fn set_flag_uint_ergonomic(&self, name: &str, value: u64) -> Result<(), String> {
        let e = self.flag_entry(name)?;
        let field = self.int_flag(e, name)?;
        if field.width == 4 && value > u64::from(u32::MAX) {
            return Err(format!("{value} does not fit {name}"));
        }
        let origin = self.bits_field(e)?;
        let mask = self.int_constant(&["JVMFlag::VALUE_ORIGIN_MASK"])? as u32;
        let ergonomic = self.int_constant(&["JVMFlagOrigin::ERGONOMIC"])? as u32;
        // SAFETY: the caller's contract: nothing else reads or writes the flag meanwhile.
        unsafe {
            field.write(value);
            origin.write(u64::from((origin.read() as u32 & !mask) | ergonomic));
        }
        Ok(())
    }

    pub fn flag_bool(&self, name: &str) -> Result<bool, String> {
        // SAFETY: the flag's storage is a C++ bool.
        self.flag_addr(name)
            .map(|a| unsafe { *(a as *const u8) != 0 })
    }

    pub fn flag_u32(&self, name: &str) -> Result<u32, String> {
        // SAFETY: the flag's storage is a C++ `uint`.
        self.flag_addr(name).map(|a| unsafe { *(a as *const u32) })
    }

    pub fn flag_u64(&self, name: &str) -> Result<u64, String> {
        // SAFETY: size_t/uintx flags are 8-byte words on x86-64 and aarch64.
        self.flag_addr(name).map(|a| unsafe { *(a as *const u64) })
    }
}

#[cfg(test)]
impl VmStructs {
    /// Tables describing `fields` ((type, field, static, offset, static address)) and
    /// `ints`, for tests of what reads them.
    pub(crate) fn fake(fields: &[(&str, &str, bool, u64, usize)], ints: &[(&str, i32)]) -> Self {
        VmStructs {
            fields: fields
                .iter()
                .map(|&(t, f, is_static, offset, address)| Field {
                    type_name: t.into(),
                    field_name: f.into(),
                    is_static,
                    offset,
                    address,
                })
                .collect(),
            types: Vec::new(),
            int_constants: ints.iter().map(|&(n, v)| (n.to_string(), v)).collect(),
        }
    }
}

/// `f` of the first of `names` that succeeds, else the first name's error.
fn first_ok<N: Copy, T>(names: &[N], f: impl Fn(N) -> Result<T, String>) -> Result<T, String> {
    let mut first = None;
    for &n in names {
        match f(n) {
            Ok(v) => return Ok(v),
            Err(e) => {
                first.get_or_insert(e);
            }
        }
    }
    Err(first.unwrap_or_else(|| "no name to look up".into()))
}

/// The collector the VM runs, from its `Use...GC` flags.
pub fn collector(vm: &VmStructs) -> &'static str {
    for (flag, name) in [
        ("UseG1GC", "G1"),
        ("UseParallelGC", "Parallel"),
        ("UseShenandoahGC", "Shenandoah"),
        ("UseSerialGC", "Serial"),
        ("UseZGC", "Z"),
        ("UseEpsilonGC", "Epsilon"),
    ] {
        if vm.flag_bool(flag).unwrap_or(false) {
            return name;
        }
    }
    "unknown"
}
