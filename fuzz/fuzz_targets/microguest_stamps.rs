//! The microguest's stamp words, which the guest writes and the VMM reads
//! back (`microguest::stamps`): pairs, four-stamp samples, the IPI rows'
//! five words with the receiver's, and the receiver's legs summarised
//! (`IpiReceiver::from_samples`). Every word is guest-chosen.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xvmm::microguest::stamps::{
    aligned_intervals, four_stamp_samples, receiver_samples, two_stamp_samples,
};
use xvmm_results::IpiReceiver;

fuzz_target!(|words: Vec<u64>| {
    let pairs = words.len() / 2;
    let m = two_stamp_samples(&words);
    assert_eq!(m.intervals.len() as u64 + m.discarded, pairs as u64);
    assert_eq!((m.opens.len(), m.closes.len()), (pairs, pairs));
    assert!(m.intervals.iter().all(|&i| i > 0));
    let aligned = aligned_intervals(&words);
    assert_eq!(aligned.len(), pairs);
    assert_eq!(
        aligned.iter().filter(|&&i| i > 0).count(),
        m.intervals.len()
    );
    assert_eq!(four_stamp_samples(&words).len(), words.len() / 4);

    // The IPI rows: a receiver's words for exactly the samples whose pair
    // stands, and a summary that accounts for each of them.
    let r = receiver_samples(&words);
    assert_eq!(
        r.intervals.len() as u64 + r.discarded,
        (words.len() / 5) as u64
    );
    assert_eq!(r.receiver.len(), r.intervals.len());
    let side = IpiReceiver::from_samples(&r.receiver);
    assert_eq!(side.samples() + side.out_of_order, r.receiver.len() as u64);
    assert!(side.halted <= side.samples());
    let longest = r.intervals.iter().max().copied().unwrap_or(0);
    assert!(side.send_to_handler.max <= longest);
});
