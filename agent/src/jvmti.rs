//! The few JVMTI entry points the agent uses, bound by their index in the function table
//! (the numbers in the JVMTI specification and `jvmti.h`), so that no header or bindgen step
//! is needed and one binary serves JDK 17 through 25.

#![allow(unsafe_code)]

use std::ffi::c_void;

pub type JniEnv = c_void;
pub type JThread = *mut c_void;

/// `jvmtiEnv`: a pointer to the function table.
#[repr(C)]
#[derive(Debug)]
pub struct JvmtiEnv {
    functions: *const *const c_void,
}

/// `JavaVM`: a pointer to the invoke interface.
#[repr(C)]
#[derive(Debug)]
pub struct JavaVm {
    functions: *const *const c_void,
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

/// Function numbers (1-based table positions) from the JVMTI specification.
mod func {
    pub const SET_EVENT_NOTIFICATION_MODE: usize = 2;
    pub const SET_EVENT_CALLBACKS: usize = 122;
    pub const ADD_CAPABILITIES: usize = 142;
}

/// `can_generate_garbage_collection_events` is bit 31 of the first capabilities word.
const CAN_GENERATE_GC_EVENTS: u32 = 1 << 31;

/// `jvmtiEventCallbacks`, as an array indexed by `event - 50`.
/// A null entry means no callback (raw pointers, not `Option`, to keep the C layout).
pub type Callbacks = [*const c_void; (event::LAST - event::FIRST + 1) as usize];

impl JavaVm {
    /// Gets a JVMTI environment.
    ///
    /// # Safety
    /// `vm` must be the `JavaVM*` HotSpot passed to `Agent_OnLoad`.
    pub unsafe fn jvmti(vm: *mut JavaVm) -> Result<*mut JvmtiEnv, String> {
        type GetEnv = unsafe extern "C" fn(*mut JavaVm, *mut *mut c_void, i32) -> i32;
        // SAFETY: GetEnv is slot 6 of the invoke interface (after 3 reserved slots,
        // DestroyJavaVM, AttachCurrentThread, DetachCurrentThread).
        let get_env: GetEnv = unsafe { std::mem::transmute(*(*vm).functions.add(6)) };
        let mut env: *mut c_void = std::ptr::null_mut();
        // SAFETY: per the JNI spec.
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
    /// # Safety
    /// `self` must be a live JVMTI environment; `n` a function number whose C signature is `F`.
    unsafe fn f<F: Copy>(&self, n: usize) -> F {
        // SAFETY: the table has entries for every numbered function (1-based).
        unsafe {
            let p = *self.functions.add(n - 1);
            std::mem::transmute_copy::<*const c_void, F>(&p)
        }
    }

    /// Asks for the capabilities the agent needs.
    ///
    /// # Safety
    /// `env` must be a live JVMTI environment in the OnLoad or live phase.
    pub unsafe fn add_capabilities(env: *mut JvmtiEnv) -> Result<(), String> {
        type F = unsafe extern "C" fn(*mut JvmtiEnv, *const [u32; 4]) -> i32;
        let caps = [CAN_GENERATE_GC_EVENTS, 0, 0, 0];
        // SAFETY: AddCapabilities(env, const jvmtiCapabilities*), a 16-byte bit set.
        let rc = unsafe { (*env).f::<F>(func::ADD_CAPABILITIES)(env, &caps) };
        if rc != 0 {
            return Err(format!("AddCapabilities failed with JVMTI error {rc}"));
        }
        Ok(())
    }

    /// Installs callbacks and enables each event that has one.
    ///
    /// # Safety
    /// `env` must be live; every callback must have the C signature JVMTI gives its event.
    pub unsafe fn set_callbacks(env: *mut JvmtiEnv, callbacks: &Callbacks) -> Result<(), String> {
        type SetCallbacks = unsafe extern "C" fn(*mut JvmtiEnv, *const Callbacks, i32) -> i32;
        type SetMode = unsafe extern "C" fn(*mut JvmtiEnv, i32, u32, JThread, ...) -> i32;
        // SAFETY: SetEventCallbacks(env, callbacks, size) copies `size` bytes of callbacks.
        let rc = unsafe {
            (*env).f::<SetCallbacks>(func::SET_EVENT_CALLBACKS)(
                env,
                callbacks,
                std::mem::size_of::<Callbacks>() as i32,
            )
        };
        if rc != 0 {
            return Err(format!("SetEventCallbacks failed with JVMTI error {rc}"));
        }
        for (i, cb) in callbacks.iter().enumerate() {
            if !cb.is_null() {
                let ev = event::FIRST + i as u32;
                // SAFETY: SetEventNotificationMode(env, mode, event, thread = all, ...).
                let rc = unsafe {
                    (*env).f::<SetMode>(func::SET_EVENT_NOTIFICATION_MODE)(
                        env,
                        JVMTI_ENABLE,
                        ev,
                        std::ptr::null_mut(),
                    )
                };
                if rc != 0 {
                    return Err(format!("enabling JVMTI event {ev} failed with error {rc}"));
                }
            }
        }
        Ok(())
    }
}
