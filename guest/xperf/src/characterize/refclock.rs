//! Counters independent of the TSC, read directly, so that the TSC's rate
//! can be measured against one that is not the current clocksource: the
//! HPET's main counter through `/dev/hpet` (the hpet driver maps its
//! registers, read-only), and the ACPI PM timer from its I/O port (root:
//! `ioperm`, the port from `/proc/ioports`). Over `tsc` or `kvm-clock`,
//! `clock_gettime` reads the TSC itself, and a rate measured against it is
//! the kernel's calibration read back.

use std::path::Path;
use std::time::{Duration, Instant};
use xvmm_host::tsc::rdtsc;

/// A free-running counter of known rate.
pub trait Counter {
    /// The counter's value (wrapping at `mask`).
    fn read(&self) -> u64;
    /// Its rate in Hz.
    fn hz(&self) -> f64;
    /// Its width: the readings wrap at `mask + 1`.
    fn mask(&self) -> u64;
}

/// The ACPI PM timer's rate (ACPI specification: 3.579545 MHz).
pub const PM_TIMER_HZ: f64 = 3_579_545.0;

/// The HPET's registers: capabilities (the period in femtoseconds in the
/// upper 32 bits), and the main counter.
const HPET_PERIOD: usize = 0x4;
const HPET_COUNTER: usize = 0xf0;
/// The longest period the HPET specification allows (100 ns, in fs).
const HPET_MAX_PERIOD_FS: u32 = 100_000_000;

/// The HPET, its registers mapped from `/dev/hpet`.
pub struct Hpet {
    base: *mut libc::c_void,
    hz: f64,
}

impl Hpet {
    /// Maps the HPET's registers; `Err` says why not (no `/dev/hpet`, no
    /// permission, a kernel without `CONFIG_HPET_MMAP`).
    pub fn open() -> Result<Hpet, String> {
        Hpet::map(Path::new("/dev/hpet"))
    }

    /// Maps the first page of `path` as the HPET's registers.
    fn map(path: &Path) -> Result<Hpet, String> {
        let shown = path.display();
        let file = std::fs::File::open(path).map_err(|e| format!("{shown}: {e}"))?;
        use std::os::fd::AsRawFd;
        // SAFETY: a new read-only shared mapping of one page of an open
        // file; the result is checked before use.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            return Err(format!("{shown} cannot be mapped: {e}"));
        }
        let mut hpet = Hpet { base, hz: 0.0 };
        hpet.hz = hpet_hz(hpet.register(HPET_PERIOD))?;
        Ok(hpet)
    }

    fn register(&self, offset: usize) -> u32 {
        // SAFETY: `offset` is one of the 4-byte-aligned registers inside
        // the page mapped in `open`, which lives as long as `self`;
        // volatile, as the hardware changes it.
        unsafe { std::ptr::read_volatile(self.base.cast::<u8>().add(offset).cast::<u32>()) }
    }
}

/// The HPET's rate from its period register (femtoseconds a tick); a
/// period the specification does not allow is refused.
fn hpet_hz(period: u32) -> Result<f64, String> {
    if period == 0 || period > HPET_MAX_PERIOD_FS {
        return Err(format!("the HPET gives a period of {period} fs"));
    }
    Ok(1e15 / f64::from(period))
}

impl Counter for Hpet {
    fn read(&self) -> u64 {
        // The low 32 bits: a 32-bit HPET has no more, and a window of
        // 100 ms is far less than 2^32 ticks at any HPET's rate.
        u64::from(self.register(HPET_COUNTER))
    }
    fn hz(&self) -> f64 {
        self.hz
    }
    fn mask(&self) -> u64 {
        u64::from(u32::MAX)
    }
}

impl Drop for Hpet {
    fn drop(&mut self) {
        // SAFETY: unmaps the page mapped in `open`, used by nothing else.
        unsafe { libc::munmap(self.base, 4096) };
    }
}

/// The first port of the "ACPI PM_TMR" range in `/proc/ioports` (`None`
/// where absent, or zero as the file shows it to an unprivileged reader).
pub fn pm_timer_port(ioports: &str) -> Option<u16> {
    ioports.lines().find_map(|l| {
        let (range, name) = l.split_once(':')?;
        if name.trim() != "ACPI PM_TMR" {
            return None;
        }
        let first = range.trim().split('-').next()?;
        u16::from_str_radix(first, 16).ok().filter(|&p| p != 0)
    })
}

/// The ACPI PM timer, its port opened to this thread.
pub struct PmTimer {
    port: u16,
    /// The port's hardware: [`HARDWARE`] (tests play it).
    io: PortIo,
}

/// How the timer reaches its port: a 32-bit read, and the release of the
/// ports `ioperm` granted (the first and how many).
#[derive(Clone, Copy)]
struct PortIo {
    read: fn(u16) -> u32,
    release: fn(u16, u64),
}

/// The CPU's I/O instructions and the kernel's `ioperm`.
const HARDWARE: PortIo = PortIo {
    read: xvmm_guest::sys::inl,
    release: xvmm_guest::sys::ioperm_release,
};

impl PmTimer {
    /// Opens the timer's port (`ioperm`: root with CAP_SYS_RAWIO).
    pub fn open() -> Result<PmTimer, String> {
        let ioports =
            std::fs::read_to_string("/proc/ioports").map_err(|e| format!("/proc/ioports: {e}"))?;
        let port = pm_timer_port(&ioports)
            .ok_or("/proc/ioports names no ACPI PM_TMR port (or hides it from non-root)")?;
        PmTimer::on_port(port)
    }

    /// The timer at `port`, granted to this thread until the timer drops.
    fn on_port(port: u16) -> Result<PmTimer, String> {
        // SAFETY: asks the kernel for access to four I/O ports; no memory
        // is touched.
        if unsafe { libc::ioperm(libc::c_ulong::from(port), 4, 1) } != 0 {
            let e = std::io::Error::last_os_error();
            return Err(format!("ioperm on the PM timer's port {port:#x}: {e}"));
        }
        Ok(PmTimer { port, io: HARDWARE })
    }
}

impl Counter for PmTimer {
    fn read(&self) -> u64 {
        // `on_port` obtained the port; a read of the PM timer has no side
        // effect.
        u64::from((self.io.read)(self.port))
    }
    fn hz(&self) -> f64 {
        PM_TIMER_HZ
    }
    fn mask(&self) -> u64 {
        // 24 bits (32 on some machines: the low 24 bits then count alike).
        0xff_ffff
    }
}

impl Drop for PmTimer {
    fn drop(&mut self) {
        (self.io.release)(self.port, 4);
    }
}

/// A counter reading and the TSC at the same moment: the TSC read on both
/// sides, the closest pair of a few tries kept, at its midpoint.
fn paired(c: &dyn Counter) -> (u64, u64) {
    let mut best = (0, 0, u64::MAX);
    for _ in 0..20 {
        let before = rdtsc();
        let value = c.read();
        let after = rdtsc();
        let gap = after.wrapping_sub(before);
        if gap < best.2 {
            best = (value, before + gap / 2, gap);
        }
    }
    (best.0, best.1)
}

/// TSC kHz from `tsc` ticks over `counted` ticks of a counter of `hz`.
pub fn khz_of(tsc: u64, counted: u64, hz: f64) -> u64 {
    if counted == 0 {
        return 0;
    }
    xvmm_results::num::u64_saturating((tsc as f64 * hz / counted as f64 / 1000.0).round())
}

/// The TSC's rate in kHz against `c` over `window` (spinning).
pub fn calibrate_khz(c: &dyn Counter, window: Duration) -> u64 {
    let (c0, t0) = paired(c);
    let started = Instant::now();
    while started.elapsed() < window {
        std::hint::spin_loop();
    }
    let (c1, t1) = paired(c);
    khz_of(
        t1.saturating_sub(t0),
        c1.wrapping_sub(c0) & c.mask(),
        c.hz(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hpets_rate_is_its_period_inverted_within_the_specification() {
        // The common 14.31818 MHz HPET: 69 841 279 fs a tick.
        let hz = hpet_hz(69_841_279).unwrap();
        assert!((hz - 14_318_180.0).abs() < 1.0, "{hz}");
        assert_eq!(hpet_hz(HPET_MAX_PERIOD_FS).unwrap(), 1e7);
        for bad in [0, HPET_MAX_PERIOD_FS + 1, u32::MAX] {
            assert!(hpet_hz(bad).unwrap_err().contains("period"), "{bad}");
        }
    }

    /// An HPET whose registers are a memfd's page: the counter is read
    /// from its register, and dropping it unmaps the page (which
    /// `/proc/self/maps` then no longer lists; a freed address could be
    /// another test's mapping at once).
    #[test]
    fn the_hpet_reads_its_counter_register_and_unmaps_on_drop() {
        use std::io::Write;
        use std::os::fd::{AsRawFd, FromRawFd};
        let name = c"xperf-hpet-unmap-test";
        // SAFETY: a new memfd with a NUL-terminated name; checked below.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), 0) };
        assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
        // SAFETY: a descriptor just opened and owned by nobody else.
        let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
        let mut page = vec![0u8; 4096];
        page[HPET_COUNTER..HPET_COUNTER + 4].copy_from_slice(&0xdead_beefu32.to_le_bytes());
        file.write_all(&page).unwrap();
        // SAFETY: a new shared read-only mapping of the memfd's one page.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        let mapped = || {
            std::fs::read_to_string("/proc/self/maps")
                .unwrap()
                .contains("memfd:xperf-hpet-unmap-test")
        };
        let hpet = Hpet {
            base,
            hz: 14_318_180.0,
        };
        assert!(mapped());
        assert_eq!(hpet.read(), 0xdead_beef);
        assert_eq!(hpet.hz(), 14_318_180.0);
        assert_eq!(hpet.mask(), 0xffff_ffff);
        drop(hpet);
        assert!(!mapped(), "the page is still mapped");
    }

    /// A counter that is read in the middle of a long access: its reading
    /// is the TSC then, so the pair's TSC must be the access's midpoint.
    struct SlowRead;

    const HALF_ACCESS: u64 = 20_000;

    impl Counter for SlowRead {
        fn read(&self) -> u64 {
            let spin = |from: u64| while rdtsc().wrapping_sub(from) < HALF_ACCESS {};
            spin(rdtsc());
            let now = rdtsc();
            spin(now);
            now
        }
        fn hz(&self) -> f64 {
            1.0
        }
        fn mask(&self) -> u64 {
            u64::MAX
        }
    }

    #[test]
    fn a_reading_is_paired_with_the_tsc_at_the_middle_of_its_access() {
        let (value, tsc) = paired(&SlowRead);
        let off = tsc.abs_diff(value);
        assert!(off < HALF_ACCESS / 2, "{off} ticks from the reading");
    }

    /// A 32-bit counter at a quarter of the TSC's rate, said to run at
    /// 1 MHz: whatever the TSC's true rate, it is then 4000 kHz.
    struct QuarterTsc;

    impl Counter for QuarterTsc {
        fn read(&self) -> u64 {
            (rdtsc() / 4) & 0xffff_ffff
        }
        fn hz(&self) -> f64 {
            1e6
        }
        fn mask(&self) -> u64 {
            0xffff_ffff
        }
    }

    #[test]
    fn the_rate_is_counted_over_the_whole_window() {
        let window = Duration::from_millis(20);
        let started = Instant::now();
        let khz = calibrate_khz(&QuarterTsc, window);
        assert!(started.elapsed() >= window, "{:?}", started.elapsed());
        assert!((3996..=4004).contains(&khz), "{khz} kHz");
    }

    /// A port that reads back its own number, doubled.
    fn doubled(port: u16) -> u32 {
        u32::from(port) * 2
    }

    thread_local! {
        static RELEASED: std::cell::Cell<Option<(u16, u64)>> = const { std::cell::Cell::new(None) };
    }

    fn note_release(port: u16, count: u64) {
        RELEASED.set(Some((port, count)));
    }

    /// The timer reads its own port, 32 bits, and gives it back when
    /// dropped.
    #[test]
    fn the_pm_timer_reads_its_port_and_counts_24_bits_at_the_acpi_rate() {
        let t = PmTimer {
            port: 0x608,
            io: PortIo {
                read: doubled,
                release: note_release,
            },
        };
        assert_eq!(t.read(), 0xc10);
        assert_eq!((t.hz(), t.mask()), (3_579_545.0, 0xff_ffff));
        assert_eq!(RELEASED.get(), None);
        drop(t);
        assert_eq!(RELEASED.get(), Some((0x608, 4)));
    }

    /// The POST code port: only a broken release (below) reads it.
    const SPARE_PORT: u16 = 0x80;

    /// The timer takes its port with ioperm where this process may, and
    /// gives it back when dropped: a read of the port afterwards faults.
    /// In a child process, which the fault ends. Where ioperm is refused
    /// (the build machine's kernel refuses it even to root), the refusal is
    /// what is checked.
    #[test]
    fn the_pm_timer_takes_its_port_and_gives_it_back() {
        // SAFETY: ioperm changes this thread's I/O bitmap only; undone.
        let allowed = unsafe { libc::ioperm(libc::c_ulong::from(SPARE_PORT), 4, 1) } == 0;
        if !allowed {
            let e = PmTimer::on_port(SPARE_PORT).err().expect("ioperm refused");
            assert!(e.contains("ioperm on the PM timer's port 0x80"), "{e}");
            return;
        }
        // SAFETY: as above.
        unsafe { libc::ioperm(libc::c_ulong::from(SPARE_PORT), 4, 0) };
        // SAFETY: the child only makes system calls and exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let code = match PmTimer::on_port(SPARE_PORT) {
                Ok(timer) => {
                    drop(timer);
                    xvmm_guest::sys::inl(SPARE_PORT);
                    1
                }
                Err(_) => 2,
            };
            // SAFETY: ends the child without the parent's atexit work.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        let ended = if libc::WIFSIGNALED(status) {
            format!("signal {}", libc::WTERMSIG(status))
        } else {
            format!("exit {}", libc::WEXITSTATUS(status))
        };
        // exit 1: the port was still ours; exit 2: ioperm was refused.
        assert_eq!(ended, format!("signal {}", libc::SIGSEGV));
    }

    /// The HPET's registers, mapped from a file that holds them.
    #[test]
    fn the_hpet_maps_its_registers_from_the_file() {
        let dir = std::env::temp_dir().join(format!("xperf-hpet-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("registers");
        let mut page = vec![0u8; 4096];
        page[HPET_PERIOD..HPET_PERIOD + 4].copy_from_slice(&69_841_279u32.to_le_bytes());
        page[HPET_COUNTER..HPET_COUNTER + 4].copy_from_slice(&0x1234_5678u32.to_le_bytes());
        std::fs::write(&file, &page).unwrap();
        let hpet = Hpet::map(&file).unwrap();
        assert_eq!(hpet.read(), 0x1234_5678);
        assert!((hpet.hz() - 14_318_180.0).abs() < 1.0, "{}", hpet.hz());
        // A directory opens but cannot be mapped.
        let e = Hpet::map(&dir).err().expect("a directory mapped");
        assert!(e.contains("cannot be mapped"), "{e}");
        let e = Hpet::map(&dir.join("absent")).err().expect("no file");
        assert!(e.contains("absent"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
    use std::cell::Cell;

    /// A counter that advances `step` per read, wrapping at 24 bits.
    struct Fake {
        now: Cell<u64>,
        step: u64,
    }

    impl Counter for Fake {
        fn read(&self) -> u64 {
            self.now
                .set(self.now.get().wrapping_add(self.step) & self.mask());
            self.now.get()
        }
        fn hz(&self) -> f64 {
            PM_TIMER_HZ
        }
        fn mask(&self) -> u64 {
            0xff_ffff
        }
    }

    #[test]
    fn the_pm_timer_port_comes_from_ioports() {
        let root = "0000-0cf7 : PCI Bus 0000:00\n  0600-0603 : ACPI PM1a_EVT_BLK\n  \
                    0608-060b : ACPI PM_TMR\n  0620-062f : ACPI GPE0_BLK\n";
        assert_eq!(pm_timer_port(root), Some(0x608));
        let hidden = "  0000-0000 : ACPI PM_TMR\n";
        assert_eq!(pm_timer_port(hidden), None);
        assert_eq!(pm_timer_port("0060-0060 : keyboard\n"), None);
    }

    #[test]
    fn a_rate_from_counted_ticks() {
        // 100 ms of a 3.579545 MHz timer against 244.5 M TSC ticks.
        assert_eq!(khz_of(244_500_000, 357_954, PM_TIMER_HZ), 2_445_003);
        assert_eq!(khz_of(1, 0, PM_TIMER_HZ), 0);
    }

    #[test]
    fn a_counter_that_wraps_still_counts_forward() {
        let near_wrap = Fake {
            now: Cell::new(0xff_fff0),
            step: 1,
        };
        let (c0, _) = paired(&near_wrap);
        near_wrap.now.set(0x10);
        let (c1, _) = paired(&near_wrap);
        assert!(c1.wrapping_sub(c0) & near_wrap.mask() < 0x100, "{c0} {c1}");
        // A counter that moves: a positive rate.
        let moving = Fake {
            now: Cell::new(0),
            step: 3,
        };
        assert!(calibrate_khz(&moving, Duration::from_millis(1)) > 0);
    }
}
