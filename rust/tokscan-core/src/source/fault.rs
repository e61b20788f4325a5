//! A memory-mapped input cut short while its pages are being read. The kernel answers a read past the file's
//! new end with SIGBUS, which kills the process. Every map of an input is registered here; a SIGBUS handler
//! finds the map that holds the faulting address, puts a page of zeros in place of the lost page and lets
//! the read go on (nothing jumps out of a Rust frame). The map is marked faulted, and the input's
//! [`super::MapGuard::check`] after the unit of work turns the file that shrank into the one-line input
//! error, so the zeros are never reported. A SIGBUS at an address outside every registered map goes to the
//! handler that was installed before (Python's `faulthandler`, or the default action).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Once;

/// Maps registered at once; past this many a map is read unprotected (the size checks still apply).
const SLOTS: usize = 1024;

struct Slot {
    start: AtomicUsize,
    len: AtomicUsize,
    faulted: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)] // the initializer of each slot of the array, not shared
const EMPTY: Slot = Slot {
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    faulted: AtomicBool::new(false),
};

static MAPS: [Slot; SLOTS] = [EMPTY; SLOTS];
static INSTALL: Once = Once::new();

/// A map's place in the registry, released on drop.
pub(crate) struct Registration {
    slot: Option<usize>,
}

impl Registration {
    /// Registers the `len` bytes mapped at `start` (installs the handler on first use).
    pub(crate) fn new(start: *const u8, len: usize) -> Registration {
        if len == 0 {
            return Registration { slot: None };
        }
        INSTALL.call_once(handler::install);
        for (i, s) in MAPS.iter().enumerate() {
            if s.start
                .compare_exchange(0, start as usize, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                s.faulted.store(false, Ordering::Release);
                s.len.store(len, Ordering::Release);
                return Registration { slot: Some(i) };
            }
        }
        Registration { slot: None }
    }

    /// Whether a page of the map was lost (replaced by zeros) since it was registered.
    pub(crate) fn faulted(&self) -> bool {
        self.slot
            .is_some_and(|i| MAPS[i].faulted.load(Ordering::Acquire))
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(i) = self.slot {
            MAPS[i].len.store(0, Ordering::Release);
            MAPS[i].start.store(0, Ordering::Release);
        }
    }
}

/// The registered map holding `addr`, if any.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn slot_of(addr: usize) -> Option<&'static Slot> {
    MAPS.iter().find(|s| {
        let start = s.start.load(Ordering::Acquire);
        let len = s.len.load(Ordering::Acquire);
        start != 0 && addr >= start && addr - start < len
    })
}

// `si_addr` and the handler's registration as written are Linux's; elsewhere maps are read unprotected (the
// size checks before and after each unit still apply).
#[cfg(target_os = "linux")]
mod handler {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::OnceLock;

    static PAGE: AtomicUsize = AtomicUsize::new(4096);
    static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

    pub(super) fn install() {
        // SAFETY: sysconf and sigaction are called with valid arguments; the structs are zeroed C structs.
        unsafe {
            let page = libc::sysconf(libc::_SC_PAGESIZE);
            if page > 0 {
                PAGE.store(page as usize, Ordering::Relaxed);
            }
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut old) != 0 {
                return;
            }
            let _ = PREVIOUS.set(old);
            let mut act: libc::sigaction = std::mem::zeroed();
            let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                on_sigbus;
            act.sa_sigaction = handler as usize;
            act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(libc::SIGBUS, &act, std::ptr::null_mut());
        }
    }

    /// Runs in the faulting thread. Only atomics and two system calls (`mmap`, `sigaction`): no allocation,
    /// no lock.
    extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // SAFETY: the kernel passes a valid siginfo for a SA_SIGINFO handler.
        let addr = unsafe { (*info).si_addr() } as usize;
        if let Some(slot) = super::slot_of(addr) {
            let page = addr & !(PAGE.load(Ordering::Relaxed) - 1);
            // SAFETY: the page lies inside a live map this process made of an input (registered, not yet
            // unmapped): replacing it by zeros changes what the reader sees, never memory anything else owns.
            let p = unsafe {
                libc::mmap(
                    page as *mut libc::c_void,
                    PAGE.load(Ordering::Relaxed),
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                slot.faulted.store(true, Ordering::Release);
                return;
            }
        }
        // Not ours (or the page could not be replaced): what was installed before decides.
        match PREVIOUS.get() {
            Some(prev) if prev.sa_sigaction > libc::SIG_IGN => {
                if prev.sa_flags & libc::SA_SIGINFO != 0 {
                    // SAFETY: a SA_SIGINFO handler installed by someone else, called as the kernel would.
                    let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                        unsafe { std::mem::transmute(prev.sa_sigaction) };
                    f(sig, info, ctx);
                } else {
                    // SAFETY: as above, a plain handler.
                    let f: extern "C" fn(libc::c_int) =
                        unsafe { std::mem::transmute(prev.sa_sigaction) };
                    f(sig);
                }
            }
            prev => {
                // The default action: restore it and return; the faulting read runs again and the signal
                // does what it would have done without tokscan.
                // SAFETY: sigaction with a valid (default) action.
                unsafe {
                    let mut dfl: libc::sigaction = std::mem::zeroed();
                    dfl.sa_sigaction = prev.map_or(libc::SIG_DFL, |p| p.sa_sigaction);
                    libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut());
                }
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod handler {
    pub(super) fn install() {}
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::io::Write;

    use super::Registration;

    #[test]
    fn a_page_lost_to_truncation_reads_as_zeros_and_marks_the_map() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&vec![7u8; 64 * 1024]).unwrap();
        // SAFETY: a private temporary file this test alone holds.
        let map = unsafe { memmap2::Mmap::map(&f) }.unwrap();
        let reg = Registration::new(map.as_ptr(), map.len());
        assert!(!reg.faulted());
        assert_eq!(map[60 * 1024], 7);
        f.set_len(4096).unwrap();
        // Without the handler this read kills the test process with SIGBUS.
        let past_end = unsafe { std::ptr::read_volatile(map.as_ptr().add(40 * 1024)) };
        assert_eq!(past_end, 0);
        assert!(reg.faulted());
        assert_eq!(map[100], 7); // the pages the file still has are untouched
        drop(reg);
        drop(map);
    }

    #[test]
    fn registrations_are_released() {
        let data = [1u8; 16];
        let regs: Vec<_> = (0..super::SLOTS + 5)
            .map(|i| Registration::new(data.as_ptr().wrapping_add(i % 16), 1))
            .collect();
        assert!(regs.iter().filter(|r| r.slot.is_some()).count() <= super::SLOTS);
        assert!(regs[super::SLOTS..].iter().all(|r| r.slot.is_none())); // full: read unprotected
        drop(regs);
        // Released: as many again find a place (other tests may hold a few meanwhile).
        let again: Vec<_> = (0..super::SLOTS - 64)
            .map(|_| Registration::new(data.as_ptr(), 1))
            .collect();
        assert!(again.iter().all(|r| r.slot.is_some()));
    }
}
