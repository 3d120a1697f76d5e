//! The exit loop's decision for each VM exit (`vcpu::exits::classify`):
//! port I/O through the bus, MMIO to unclaimed addresses (reads answer all
//! ones), system events, fatal exits. Everything in an exit is guest-chosen.
#![no_main]

use kvm_ioctls::VcpuExit;
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use xvmm::devices::{IoEvent, PortBus};
use xvmm::vcpu::exits::{classify, Fatal, GuestEnd, Step};

#[derive(Arbitrary, Debug)]
enum Exit {
    IoIn { port: u16, len: u16 },
    IoOut { port: u16, data: Vec<u8> },
    MmioRead { addr: u64, len: u8 },
    MmioWrite { addr: u64, data: Vec<u8> },
    SystemEvent { kind: u32, data: Vec<u64> },
    FailEntry { reason: u64, cpu: u32 },
    Hlt,
    Shutdown,
    Intr,
    InternalError,
    Debug,
}

fuzz_target!(|exits: Vec<Exit>| {
    let mut bus = PortBus::new(None);
    for exit in exits {
        let mut buf = Vec::new();
        let step = match &exit {
            Exit::IoIn { port, len } => {
                buf.resize(usize::from(*len) % 4097, 0x5a);
                classify(VcpuExit::IoIn(*port, &mut buf), &mut bus)
            }
            Exit::IoOut { port, data } => classify(VcpuExit::IoOut(*port, data), &mut bus),
            Exit::MmioRead { addr, len } => {
                // KVM's MMIO exits carry at most 8 bytes.
                buf.resize(usize::from(*len) % 9, 0x5a);
                let step = classify(VcpuExit::MmioRead(*addr, &mut buf), &mut bus);
                assert!(buf.iter().all(|&b| b == 0xff), "MMIO read of {buf:?}");
                step
            }
            Exit::MmioWrite { addr, data } => classify(
                VcpuExit::MmioWrite(*addr, &data[..data.len().min(8)]),
                &mut bus,
            ),
            Exit::SystemEvent { kind, data } => {
                classify(VcpuExit::SystemEvent(*kind, data), &mut bus)
            }
            Exit::FailEntry { reason, cpu } => {
                classify(VcpuExit::FailEntry(*reason, *cpu), &mut bus)
            }
            Exit::Hlt => classify(VcpuExit::Hlt, &mut bus),
            Exit::Shutdown => classify(VcpuExit::Shutdown, &mut bus),
            Exit::Intr => classify(VcpuExit::Intr, &mut bus),
            Exit::InternalError => classify(VcpuExit::InternalError, &mut bus),
            Exit::Debug => classify(VcpuExit::Debug(Default::default()), &mut bus),
        };
        let expected_kind = match &exit {
            Exit::IoIn { .. } => matches!(step, Step::Io(IoEvent::Continue)),
            Exit::IoOut { .. } => matches!(step, Step::Io(_)),
            Exit::MmioRead { .. } | Exit::MmioWrite { .. } => step == Step::Mmio,
            Exit::SystemEvent { kind: 1, .. } => step == Step::End(GuestEnd::PowerOff),
            Exit::SystemEvent { kind: 2, .. } => step == Step::End(GuestEnd::Reset),
            Exit::SystemEvent { kind: 3, .. } => step == Step::Fatal(Fatal::Crash),
            Exit::FailEntry { reason, cpu } => step == Step::Fatal(Fatal::FailEntry(*reason, *cpu)),
            Exit::Hlt => step == Step::Fatal(Fatal::Hlt),
            Exit::Shutdown => step == Step::Fatal(Fatal::Shutdown),
            Exit::Intr => step == Step::Kicked,
            Exit::InternalError => step == Step::Fatal(Fatal::Internal),
            Exit::SystemEvent { .. } | Exit::Debug => matches!(step, Step::Fatal(Fatal::Other(_))),
        };
        assert!(expected_kind, "{exit:?} gave {step:?}");
    }
});
