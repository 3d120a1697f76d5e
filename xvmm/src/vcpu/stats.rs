//! KVM's own count of a vCPU's exits, read from its binary statistics
//! (`KVM_GET_STATS_FD`, Linux 5.14+; `Documentation/virt/kvm/api.rst`,
//! "The kvm_stats_header"). KVM bumps the `exits` counter once for every
//! exit of the vCPU, the ones it handles itself included, so the count
//! tells whether an instruction exited without timing it, and without the
//! tracepoints that PVM never fires.
//!
//! The file holds a header, the descriptors (one per statistic: flags,
//! exponent, size in u64 words, offset into the data block, bucket size,
//! then a NUL-padded name of the header's `name_size` bytes) and the data.

use std::fs::File;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;

use kvm_bindings::{
    kvm_stats_desc, kvm_stats_header, KVM_STATS_TYPE_CUMULATIVE, KVM_STATS_TYPE_MASK,
};
use kvm_ioctls::VcpuFd;

/// Bytes of `struct kvm_stats_header`: six u32.
const HEADER_LEN: usize = std::mem::size_of::<kvm_stats_header>();
/// Bytes of `struct kvm_stats_desc` before its name.
const DESC_FIXED_LEN: usize = std::mem::size_of::<kvm_stats_desc>();
/// More than any KVM has (x86 vCPUs: under 64; names: 48 bytes), so a
/// header that claims more is not one.
const MAX_DESCRIPTORS: u32 = 4096;
const MAX_NAME_SIZE: u32 = 1024;

mod ioctls {
    const KVMIO: u32 = 0xae;
    vmm_sys_util::ioctl_io_nr!(KVM_GET_STATS_FD, KVMIO, 0xce);
}

/// Where the descriptors and the data lie, as the header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatsHeader {
    pub name_size: u32,
    pub descriptors: u32,
    pub descriptors_at: u32,
    pub data_at: u32,
}

impl StatsHeader {
    /// Reads the header from its first 24 bytes.
    pub fn parse(bytes: &[u8]) -> Result<StatsHeader, String> {
        let word = |i: usize| -> Option<u32> {
            let b = bytes.get(i * 4..i * 4 + 4)?;
            Some(u32::from_le_bytes(b.try_into().ok()?))
        };
        let (Some(name_size), Some(descriptors), Some(descriptors_at), Some(data_at)) =
            (word(1), word(2), word(4), word(5))
        else {
            return Err(format!(
                "the header is {} bytes, not {HEADER_LEN}",
                bytes.len()
            ));
        };
        if name_size == 0 || name_size > MAX_NAME_SIZE || descriptors > MAX_DESCRIPTORS {
            return Err(format!(
                "the header claims {descriptors} statistics of {name_size}-byte names"
            ));
        }
        Ok(StatsHeader {
            name_size,
            descriptors,
            descriptors_at,
            data_at,
        })
    }

    /// Bytes of the whole descriptor table.
    pub fn descriptors_len(&self) -> usize {
        self.descriptor_len() * self.descriptors as usize
    }

    fn descriptor_len(&self) -> usize {
        DESC_FIXED_LEN + self.name_size as usize
    }

    /// The file offset of the one-word cumulative counter `name`, found in
    /// the descriptor table `table`.
    pub fn counter_at(&self, table: &[u8], name: &str) -> Result<u64, String> {
        let len = self.descriptor_len();
        for desc in table.chunks_exact(len).take(self.descriptors as usize) {
            let raw_name = &desc[DESC_FIXED_LEN..];
            let end = raw_name
                .iter()
                .position(|&b| b == 0)
                .unwrap_or(raw_name.len());
            if &raw_name[..end] != name.as_bytes() {
                continue;
            }
            let flags = u32::from_le_bytes(desc[0..4].try_into().expect("4 bytes"));
            let size = u16::from_le_bytes(desc[6..8].try_into().expect("2 bytes"));
            let offset = u32::from_le_bytes(desc[8..12].try_into().expect("4 bytes"));
            if flags & KVM_STATS_TYPE_MASK != KVM_STATS_TYPE_CUMULATIVE || size != 1 {
                return Err(format!(
                    "`{name}` is not a one-word cumulative counter (flags {flags:#x}, {size} words)"
                ));
            }
            return Ok(u64::from(self.data_at) + u64::from(offset));
        }
        Err(format!("KVM keeps no `{name}` statistic"))
    }
}

/// A vCPU's `exits` counter.
#[derive(Debug)]
pub struct ExitCounter {
    file: File,
    at: u64,
}

impl ExitCounter {
    /// Opens `vcpu`'s statistics and finds its `exits` counter; the reason
    /// when this KVM has none (before Linux 5.14, or no such statistic).
    pub fn open(vcpu: &VcpuFd) -> Result<ExitCounter, String> {
        // SAFETY: KVM_GET_STATS_FD takes no argument and returns a new descriptor.
        let fd = unsafe { vmm_sys_util::ioctl::ioctl(vcpu, ioctls::KVM_GET_STATS_FD()) };
        if fd < 0 {
            return Err(format!(
                "KVM_GET_STATS_FD failed: {} (it needs Linux 5.14+)",
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: the descriptor is new and ours alone.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let mut head = [0u8; HEADER_LEN];
        file.read_exact_at(&mut head, 0)
            .map_err(|e| format!("reading KVM's statistics header: {e}"))?;
        let header = StatsHeader::parse(&head)?;
        let mut table = vec![0u8; header.descriptors_len()];
        file.read_exact_at(&mut table, u64::from(header.descriptors_at))
            .map_err(|e| format!("reading KVM's statistics descriptors: {e}"))?;
        let at = header.counter_at(&table, "exits")?;
        let counter = ExitCounter { file, at };
        counter.read()?;
        Ok(counter)
    }

    /// The exits KVM has counted for the vCPU since it was created.
    pub fn read(&self) -> Result<u64, String> {
        let mut word = [0u8; 8];
        self.file
            .read_exact_at(&mut word, self.at)
            .map_err(|e| format!("reading KVM's exit count: {e}"))?;
        Ok(u64::from_le_bytes(word))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(name_size: u32, descriptors: u32, data_at: u32) -> Vec<u8> {
        [0, name_size, descriptors, 24, 24 + 8, data_at]
            .iter()
            .flat_map(|w: &u32| w.to_le_bytes())
            .collect()
    }

    fn descriptor(name: &str, flags: u32, size: u16, offset: u32) -> Vec<u8> {
        let mut d = Vec::new();
        d.extend(flags.to_le_bytes());
        d.extend(0i16.to_le_bytes());
        d.extend(size.to_le_bytes());
        d.extend(offset.to_le_bytes());
        d.extend(0u32.to_le_bytes());
        let mut n = name.as_bytes().to_vec();
        n.resize(8, 0);
        d.extend(n);
        d
    }

    #[test]
    fn the_counter_is_found_by_its_whole_name_at_data_plus_offset() {
        let h = StatsHeader::parse(&header(8, 3, 1000)).unwrap();
        assert_eq!(h.descriptors_len(), 3 * 24);
        let table = [
            descriptor("exits_x", 0, 1, 8),
            descriptor("halt", 0x24, 32, 16),
            descriptor("exits", 0, 1, 40),
        ]
        .concat();
        assert_eq!(h.counter_at(&table, "exits"), Ok(1040));
        assert!(h
            .counter_at(&table, "io_exits")
            .unwrap_err()
            .contains("no `io_exits`"));
        // An instant value or a histogram is not a count of events.
        let err = h.counter_at(&table, "halt").unwrap_err();
        assert!(err.contains("not a one-word cumulative counter"), "{err}");
        let instant = descriptor("exits", 1, 1, 0);
        assert!(h.counter_at(&instant, "exits").is_err());
    }

    #[test]
    fn a_short_or_implausible_header_is_refused() {
        assert!(StatsHeader::parse(&[0; 10])
            .unwrap_err()
            .contains("10 bytes"));
        assert!(StatsHeader::parse(&header(0, 3, 0)).is_err());
        assert!(StatsHeader::parse(&header(8, MAX_DESCRIPTORS + 1, 0)).is_err());
        assert!(StatsHeader::parse(&header(MAX_NAME_SIZE + 1, 1, 0)).is_err());
        // A table cut short ends the search rather than reading past it.
        let h = StatsHeader::parse(&header(8, 2, 0)).unwrap();
        let cut = descriptor("exits", 0, 1, 0);
        assert_eq!(
            h.counter_at(&cut[..20], "exits").unwrap_err(),
            "KVM keeps no `exits` statistic"
        );
    }

    /// A real-mode vCPU that runs `out 0x10, al` twice, then `hlt`: three
    /// exits that reach user space, each a KVM_RUN return, and KVM counts
    /// each (and any of its own besides).
    #[test]
    fn a_real_vcpu_counts_the_exits_it_took() {
        use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend};
        let Ok(kvm) = kvm_ioctls::Kvm::new() else {
            return;
        };
        let vm = kvm.create_vm().unwrap();
        let code: [u8; 5] = [0xe6, 0x10, 0xe6, 0x10, 0xf4];
        let page =
            vm_memory::GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 0x1000)]).unwrap();
        page.write_slice(&code, GuestAddress(0)).unwrap();
        let host = page.get_host_address(GuestAddress(0)).unwrap();
        let region = kvm_bindings::kvm_userspace_memory_region {
            slot: 0,
            flags: 0,
            guest_phys_addr: 0,
            memory_size: 0x1000,
            userspace_addr: host as u64,
        };
        // SAFETY: the region is `page`'s mapping, which outlives the VM.
        unsafe { vm.set_user_memory_region(region) }.unwrap();
        let mut vcpu = vm.create_vcpu(0).unwrap();
        let mut sregs = vcpu.get_sregs().unwrap();
        (sregs.cs.base, sregs.cs.selector) = (0, 0);
        vcpu.set_sregs(&sregs).unwrap();
        let regs = kvm_bindings::kvm_regs {
            rip: 0,
            rflags: 2,
            ..Default::default()
        };
        vcpu.set_regs(&regs).unwrap();
        let Ok(counter) = ExitCounter::open(&vcpu) else {
            return;
        };
        let mut returns = 0;
        loop {
            returns += 1;
            match vcpu.run().unwrap() {
                kvm_ioctls::VcpuExit::IoOut(0x10, _) => {}
                kvm_ioctls::VcpuExit::Hlt => break,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(returns, 3);
        let counted = counter.read().unwrap();
        assert!((3..10).contains(&counted), "{counted}");
    }

    #[test]
    fn a_real_vcpu_that_never_ran_has_counted_no_exit() {
        let Ok(kvm) = kvm_ioctls::Kvm::new() else {
            return;
        };
        let vm = kvm.create_vm().unwrap();
        let vcpu = vm.create_vcpu(0).unwrap();
        let counter = match ExitCounter::open(&vcpu) {
            Ok(c) => c,
            // A KVM before 5.14: said, not failed.
            Err(why) => return assert!(why.contains("KVM_GET_STATS_FD"), "{why}"),
        };
        // A vCPU that never ran has taken no exit.
        assert_eq!(counter.read(), Ok(0));
    }
}
