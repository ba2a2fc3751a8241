//! The few JVMTI entry points the agent uses, through typed prefixes of JNI's invoke interface,
//! JVMTI's function table and its event-callback table: each slot the agent calls or fills has
//! its C signature as a Rust type, so the compiler checks every call and every callback, and
//! the slots in between are padding sized from the numbers in the JVMTI specification and
//! `jvmti.h` (the layout test pins them). No header or bindgen step is needed, and one binary
//! serves JDK 17 through 25 (the tables only grow at their ends).

#![allow(unsafe_code)]

use std::ffi::c_void;

pub type JniEnv = c_void;
pub type JThread = *mut c_void;

/// A slot the agent neither calls nor fills.
type Unused = *const c_void;

type GetEnv = unsafe extern "C" fn(*mut JavaVm, *mut *mut c_void, i32) -> i32;
type SetEventNotificationMode = unsafe extern "C" fn(*mut JvmtiEnv, i32, u32, JThread, ...) -> i32;
type SetEventCallbacks = unsafe extern "C" fn(*mut JvmtiEnv, *const EventCallbacks, i32) -> i32;
type AddCapabilities = unsafe extern "C" fn(*mut JvmtiEnv, *const [u32; 4]) -> i32;

/// The start of JNI's `JNIInvokeInterface_`: three reserved slots, DestroyJavaVM,
/// AttachCurrentThread, DetachCurrentThread, GetEnv (the rest is not used).
#[repr(C)]
struct InvokeInterface {
    _reserved: [Unused; 3],
    _destroy_java_vm: Unused,
    _attach_current_thread: Unused,
    _detach_current_thread: Unused,
    get_env: Option<GetEnv>,
}

/// The start of `jvmtiInterface_1_`, up to AddCapabilities (function 142; function `n` sits
/// in slot `n - 1`, slot 0 being reserved).
#[repr(C)]
struct FunctionTable {
    _reserved1: Unused,
    set_event_notification_mode: Option<SetEventNotificationMode>,
    _3_to_121: [Unused; 119],
    set_event_callbacks: Option<SetEventCallbacks>,
    _123_to_141: [Unused; 19],
    add_capabilities: Option<AddCapabilities>,
}

/// `jvmtiEnv`: a pointer to the function table.
#[repr(C)]
#[derive(Debug)]
pub struct JvmtiEnv {
    functions: *const FunctionTable,
}

/// `JavaVM`: a pointer to the invoke interface.
#[repr(C)]
#[derive(Debug)]
pub struct JavaVm {
    functions: *const InvokeInterface,
}

pub const JNI_OK: i32 = 0;
pub const JVMTI_VERSION_1_2: i32 = 0x3001_0200;
const JVMTI_ENABLE: i32 = 1;

/// Event numbers from the JVMTI specification.
pub mod event {
    pub const VM_INIT: u32 = 50;
    pub const VM_DEATH: u32 = 51;
    pub const THREAD_START: u32 = 52;
    pub const DATA_DUMP_REQUEST: u32 = 71;
    pub const GARBAGE_COLLECTION_START: u32 = 81;
    pub const GARBAGE_COLLECTION_FINISH: u32 = 82;
    pub const FIRST: u32 = 50;
    pub const LAST: u32 = 86;
}

/// `can_generate_garbage_collection_events` is bit 31 of the first capabilities word.
const CAN_GENERATE_GC_EVENTS: u32 = 1 << 31;

pub type VmInit = unsafe extern "C" fn(*mut JvmtiEnv, *mut JniEnv, JThread);
pub type VmDeath = unsafe extern "C" fn(*mut JvmtiEnv, *mut JniEnv);
pub type ThreadStart = unsafe extern "C" fn(*mut JvmtiEnv, *mut JniEnv, JThread);
pub type DataDumpRequest = unsafe extern "C" fn(*mut JvmtiEnv);
pub type GarbageCollection = unsafe extern "C" fn(*mut JvmtiEnv);

/// `jvmtiEventCallbacks` for events 50 to 86 (JDK 17's whole table; later JDKs add slots at
/// its end, which stay unset since SetEventCallbacks is given this table's size). `None` is
/// the C null: no callback.
#[repr(C)]
#[derive(Debug)]
pub struct EventCallbacks {
    pub vm_init: Option<VmInit>,
    pub vm_death: Option<VmDeath>,
    pub thread_start: Option<ThreadStart>,
    pub(crate) _53_to_70: [Unused; 18],
    pub data_dump_request: Option<DataDumpRequest>,
    pub(crate) _72_to_80: [Unused; 9],
    pub garbage_collection_start: Option<GarbageCollection>,
    pub garbage_collection_finish: Option<GarbageCollection>,
    pub(crate) _83_to_86: [Unused; 4],
}

impl EventCallbacks {
    /// No callback at all.
    pub const NONE: EventCallbacks = EventCallbacks {
        vm_init: None,
        vm_death: None,
        thread_start: None,
        _53_to_70: [std::ptr::null(); 18],
        data_dump_request: None,
        _72_to_80: [std::ptr::null(); 9],
        garbage_collection_start: None,
        garbage_collection_finish: None,
        _83_to_86: [std::ptr::null(); 4],
    };

    /// The events that have a callback, by number.
    fn enabled(&self) -> Vec<u32> {
        [
            (event::VM_INIT, self.vm_init.is_some()),
            (event::VM_DEATH, self.vm_death.is_some()),
            (event::THREAD_START, self.thread_start.is_some()),
            (event::DATA_DUMP_REQUEST, self.data_dump_request.is_some()),
            (
                event::GARBAGE_COLLECTION_START,
                self.garbage_collection_start.is_some(),
            ),
            (
                event::GARBAGE_COLLECTION_FINISH,
                self.garbage_collection_finish.is_some(),
            ),
        ]
        .into_iter()
        .filter_map(|(e, on)| on.then_some(e))
        .collect()
    }
}

impl JavaVm {
    /// Gets a JVMTI environment.
    ///
    /// # Safety
    /// `vm` must be the `JavaVM*` HotSpot passed to `Agent_OnLoad`.
    pub unsafe fn jvmti(vm: *mut JavaVm) -> Result<*mut JvmtiEnv, String> {
        // SAFETY: a live JavaVM points at its invoke interface, whose prefix is
        // `InvokeInterface`.
        let get_env = unsafe { (*(*vm).functions).get_env }.ok_or("the JVM has no GetEnv")?;
        let mut env: *mut c_void = std::ptr::null_mut();
        // SAFETY: GetEnv(vm, &env, version) writes one pointer into `env`.
        let rc = unsafe { get_env(vm, &mut env, JVMTI_VERSION_1_2) };
        if rc != JNI_OK || env.is_null() {
            return Err(format!(
                "the JVM offers no JVMTI 1.2 environment (GetEnv returned {rc})"
            ));
        }
        Ok(env.cast())
    }
}

impl JvmtiEnv {
    /// The function table of a live environment.
    ///
    /// # Safety
    /// `env` must be a live JVMTI environment.
    unsafe fn table<'a>(env: *mut JvmtiEnv) -> &'a FunctionTable {
        // SAFETY: a live jvmtiEnv points at its function table (static in HotSpot), whose
        // prefix is `FunctionTable`.
        unsafe { &*(*env).functions }
    }

    /// Asks for the capabilities the agent needs.
    ///
    /// # Safety
    /// `env` must be a live JVMTI environment in the OnLoad or live phase.
    pub unsafe fn add_capabilities(env: *mut JvmtiEnv) -> Result<(), String> {
        // SAFETY: the caller gives a live environment.
        let add = unsafe { Self::table(env) }
            .add_capabilities
            .ok_or("the JVM has no AddCapabilities")?;
        let caps = [CAN_GENERATE_GC_EVENTS, 0, 0, 0];
        // SAFETY: AddCapabilities(env, const jvmtiCapabilities*) reads the 16-byte bit set.
        let rc = unsafe { add(env, &caps) };
        if rc != 0 {
            return Err(format!("AddCapabilities failed with JVMTI error {rc}"));
        }
        Ok(())
    }

    /// Installs callbacks and enables each event that has one.
    ///
    /// # Safety
    /// `env` must be a live JVMTI environment in the OnLoad or live phase.
    pub unsafe fn set_callbacks(
        env: *mut JvmtiEnv,
        callbacks: &EventCallbacks,
    ) -> Result<(), String> {
        // SAFETY: the caller gives a live environment.
        let table = unsafe { Self::table(env) };
        let set = table
            .set_event_callbacks
            .ok_or("the JVM has no SetEventCallbacks")?;
        let mode = table
            .set_event_notification_mode
            .ok_or("the JVM has no SetEventNotificationMode")?;
        // SAFETY: SetEventCallbacks(env, callbacks, size) copies `size` bytes of callbacks;
        // each one's type is its event's C signature.
        let rc = unsafe { set(env, callbacks, std::mem::size_of::<EventCallbacks>() as i32) };
        if rc != 0 {
            return Err(format!("SetEventCallbacks failed with JVMTI error {rc}"));
        }
        for ev in callbacks.enabled() {
            // SAFETY: SetEventNotificationMode(env, mode, event, thread = all, ...).
            let rc = unsafe { mode(env, JVMTI_ENABLE, ev, std::ptr::null_mut()) };
            if rc != 0 {
                return Err(format!("enabling JVMTI event {ev} failed with error {rc}"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    const SLOT: usize = size_of::<usize>();

    #[test]
    fn the_tables_put_each_entry_where_the_specification_numbers_it() {
        // JNI's invoke interface: GetEnv is its seventh slot.
        assert_eq!(offset_of!(InvokeInterface, get_env), 6 * SLOT);
        // JVMTI function n sits in slot n - 1.
        let function = |n: usize| (n - 1) * SLOT;
        assert_eq!(
            offset_of!(FunctionTable, set_event_notification_mode),
            function(2)
        );
        assert_eq!(
            offset_of!(FunctionTable, set_event_callbacks),
            function(122)
        );
        assert_eq!(offset_of!(FunctionTable, add_capabilities), function(142));
        // Event e's callback sits in slot e - 50; the table ends with event 86.
        let callback = |e: u32| (e - event::FIRST) as usize * SLOT;
        assert_eq!(
            offset_of!(EventCallbacks, vm_init),
            callback(event::VM_INIT)
        );
        assert_eq!(
            offset_of!(EventCallbacks, vm_death),
            callback(event::VM_DEATH)
        );
        assert_eq!(
            offset_of!(EventCallbacks, thread_start),
            callback(event::THREAD_START)
        );
        assert_eq!(
            offset_of!(EventCallbacks, data_dump_request),
            callback(event::DATA_DUMP_REQUEST)
        );
        assert_eq!(
            offset_of!(EventCallbacks, garbage_collection_start),
            callback(event::GARBAGE_COLLECTION_START)
        );
        assert_eq!(
            offset_of!(EventCallbacks, garbage_collection_finish),
            callback(event::GARBAGE_COLLECTION_FINISH)
        );
        assert_eq!(
            size_of::<EventCallbacks>(),
            (event::LAST - event::FIRST + 1) as usize * SLOT
        );
        // `None` is the C null pointer.
        assert_eq!(size_of::<Option<GarbageCollection>>(), SLOT);
    }

    #[test]
    fn only_events_with_a_callback_are_enabled() {
        unsafe extern "C" fn gc(_: *mut JvmtiEnv) {}
        let cbs = EventCallbacks {
            garbage_collection_finish: Some(gc),
            data_dump_request: Some(gc),
            ..EventCallbacks::NONE
        };
        assert_eq!(
            cbs.enabled(),
            vec![event::DATA_DUMP_REQUEST, event::GARBAGE_COLLECTION_FINISH]
        );
        assert!(EventCallbacks::NONE.enabled().is_empty());
    }
}
