//! The IPI rows' receiver side: what the receiving vCPU stamped on the
//! sender's clock, per sample, summarised.

use crate::Stats;
use serde::{Deserialize, Serialize};

/// One IPI sample's stamps: the sender's pair and the receiver's words.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IpiStamps {
    /// The sender's opening stamp, before its ICR write.
    pub sent: u64,
    /// The sender's closing stamp, once it saw the handler's word.
    pub acked: u64,
    /// The receiver's stamp as its handler began.
    pub handler: u64,
    /// The receiver's stamp after its EOI.
    pub eoi: u64,
    /// The TSC at which the receiver went to halt before the IPI was sent;
    /// 0 when it had not.
    pub halted_at: u64,
}

/// The receiver side of an IPI row. Both vCPUs read one TSC (the VMM gives
/// them one offset), which each sample checks: its handler stamp must fall
/// between the sender's two, since the handler runs after the send and the
/// sender's closing stamp waits for it. The figures are raw ticks (no stamp
/// correction: the two ends are stamped on different CPUs).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct IpiReceiver {
    /// The sender's opening stamp to the receiver handler's first: the ICR
    /// write, the delivery, the receiver's wake-up and the injection.
    pub send_to_handler: Stats,
    /// The handler's first stamp to its stamp after the EOI.
    pub handler_to_eoi: Stats,
    /// Samples, of those summarised, whose receiver had gone to halt
    /// before the IPI was sent.
    pub halted: u64,
    /// Samples left out: a handler stamp outside the sender's interval, or
    /// an EOI stamp before the handler's (the clocks disagree, or a stamp
    /// is missing).
    pub out_of_order: u64,
    /// The host CPU the sender's vCPU thread was pinned to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender_cpu: Option<u32>,
    /// The host CPU the receiver's vCPU thread was pinned to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receiver_cpu: Option<u32>,
}

impl IpiReceiver {
    /// Summarises the samples whose stamps are in causal order; the others
    /// are counted in `out_of_order`.
    pub fn from_samples(samples: &[IpiStamps]) -> IpiReceiver {
        let ordered =
            |s: &&IpiStamps| s.sent <= s.handler && s.handler <= s.acked && s.handler <= s.eoi;
        let good: Vec<&IpiStamps> = samples.iter().filter(ordered).collect();
        let legs = |f: fn(&IpiStamps) -> u64| -> Stats {
            let values: Vec<u64> = good.iter().map(|s| f(s)).collect();
            Stats::from_samples(&values)
        };
        IpiReceiver {
            send_to_handler: legs(|s| s.handler - s.sent),
            handler_to_eoi: legs(|s| s.eoi - s.handler),
            halted: good
                .iter()
                .filter(|s| s.halted_at != 0 && s.halted_at <= s.sent)
                .count() as u64,
            out_of_order: (samples.len() - good.len()) as u64,
            sender_cpu: None,
            receiver_cpu: None,
        }
    }

    /// Samples summarised.
    pub fn samples(&self) -> u64 {
        self.send_to_handler.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(sent: u64, handler: u64, eoi: u64, acked: u64, halted_at: u64) -> IpiStamps {
        IpiStamps {
            sent,
            acked,
            handler,
            eoi,
            halted_at,
        }
    }

    #[test]
    fn only_samples_in_causal_order_are_summarised() {
        let r = IpiReceiver::from_samples(&[
            s(100, 400, 450, 500, 90),
            s(1000, 1200, 1300, 1250, 0),
            // A handler before the send: two clocks that disagree.
            s(2000, 1990, 2100, 2200, 1500),
            // A handler after the sender saw it: likewise.
            s(3000, 3300, 3400, 3200, 0),
            // An EOI stamp before the handler's.
            s(4000, 4100, 4050, 4200, 0),
        ]);
        assert_eq!((r.samples(), r.out_of_order), (2, 3));
        assert_eq!((r.send_to_handler.min, r.send_to_handler.max), (200, 300));
        assert_eq!((r.handler_to_eoi.min, r.handler_to_eoi.max), (50, 100));
        assert_eq!(r.halted, 1, "only the first had halted before its send");
    }

    #[test]
    fn a_halt_after_the_send_is_not_counted_halted() {
        let r =
            IpiReceiver::from_samples(&[s(100, 400, 450, 500, 150), s(100, 400, 450, 500, 100)]);
        assert_eq!(r.halted, 1);
    }
}
