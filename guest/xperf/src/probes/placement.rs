//! Where the probes go: the probed function's address, names and ftrace
//! site, and the instruction inside it for the int3 and jump-optimized
//! kprobes (the same instruction for both).
//!
//! Unless the user names the instruction (`SYMBOL+OFFSET`), it is the first
//! one after the ftrace call site that the kernel can jump-optimize, so that
//! the int3/optimized pair compares one address: instructions are tried in
//! order (the kernel's decoder refuses offsets that are no instruction
//! boundary) until one is marked `[OPTIMIZED]` when enabled with
//! optimization on — the kernel sets that mark only for a probe it has
//! prepared for optimization. Each try is a kprobe enabled for a moment and
//! deleted again.

use super::modes::Target;
use super::parse::{self, ProbePoint};
use super::sampling::Kind;
use super::session::{read_text, Session, GROUP};
use std::path::Path;

/// The ftrace call site at a function's start (`call __fentry__`, NOPed).
const FENTRY_CALL_SIZE: u64 = 5;
/// How many bytes past the first instruction the search looks.
const SEARCH_BYTES: u64 = 64;

/// The function of `point`: address and names from kallsyms, ftrace site
/// from `available_filter_functions_addrs`, and the inside instruction (the
/// given offset, else the one after the ftrace call site).
pub fn resolve(kind: Kind, point: &ProbePoint, kallsyms: Option<&str>, root: &Path) -> Target {
    let address = kallsyms
        .map(|k| parse::kallsyms_text_addresses(k, &point.symbol))
        .and_then(|a| a.first().copied())
        .unwrap_or(0);
    let mut aliases = match kallsyms {
        Some(k) if address != 0 => parse::kallsyms_aliases(k, address),
        _ => Vec::new(),
    };
    if !aliases.contains(&point.symbol) {
        aliases.insert(0, point.symbol.clone());
    }
    let site = if address == 0 {
        Err(format!(
            "the address of {} is hidden or unknown",
            point.symbol
        ))
    } else {
        read_text(&root.join("available_filter_functions_addrs"))
            .map_err(|e| format!("no ftrace call-site list ({e})"))
            .and_then(|addrs| {
                parse::ftrace_site(&addrs, address).ok_or_else(|| {
                    format!(
                        "{} has no ftrace call site (notrace, noinstr or inlined)",
                        point.symbol
                    )
                })
            })
    };
    let ftrace_name = site
        .as_ref()
        .map(|(_, name)| name.clone())
        .unwrap_or_else(|_| point.symbol.clone());
    let traceable = site.as_ref().map(|_| ()).map_err(String::clone);
    let offset = match point.offset {
        Some(off) => Ok(off),
        None => site
            .map(|(at, _)| at - address + FENTRY_CALL_SIZE)
            .map_err(|why| format!("{why}: give the instruction as {}+OFFSET", point.symbol)),
    };
    Target {
        kind,
        symbol: point.symbol.clone(),
        address,
        aliases,
        ftrace_name,
        traceable,
        offset,
    }
}

/// Checks a user-given `SYMBOL+OFFSET` with the kernel's own decoder by
/// creating (and deleting) a kprobe there: an offset that is no
/// instruction boundary, a blacklisted function... is the user's error.
pub fn check_given(session: &mut Session, t: &Target) -> Result<(), String> {
    let Ok(off) = t.offset else { return Ok(()) };
    let name = t.event("check");
    let place = format!("{}+{off}", t.symbol);
    session
        .create_event(&name, &format!("p:{GROUP}/{name} {place}"))
        .map_err(|why| format!("cannot probe {place}: {}", refusal(session, t, why)))?;
    session.remove_event(&name).map_err(|e| e.to_string())
}

/// Why the kernel refused a probe on `t`: the blacklist says more than
/// EINVAL when the function is on it.
pub fn refusal(session: &mut Session, t: &Target, why: String) -> String {
    match session.debugfs("kprobes/blacklist") {
        Some(list) if parse::kprobe_blacklisted(&list, &t.aliases) => format!(
            "{} is on the kprobe blacklist (kprobes/blacklist): {why}",
            t.symbol
        ),
        _ => why,
    }
}

/// One try: is `off` an instruction the kernel prepares for jump
/// optimization? `Err` for offsets it refuses outright.
fn optimizable_at(session: &mut Session, t: &Target, off: u64) -> Result<bool, String> {
    let name = t.event("search");
    session.create_event(&name, &format!("p:{GROUP}/{name} {}+{off}", t.symbol))?;
    let enable = format!("events/{GROUP}/{name}/enable");
    let listed = session
        .set(&enable, "1")
        .map(|()| session.debugfs("kprobes/list").unwrap_or_default());
    let _ = session.set(&enable, "0");
    let _ = session.remove_event(&name);
    let list = listed.map_err(|e| e.to_string())?;
    let address = t.address.wrapping_add(off);
    Ok(parse::kprobe_list(&list, 'k', address, &t.aliases, off)
        .first()
        .is_some_and(|p| p.optimized))
}

/// Moves an automatically chosen inside offset to the first instruction
/// the kernel can jump-optimize. Needs kprobe events, OPTPROBES and the
/// kprobes list; otherwise (or when no instruction qualifies) the offset
/// stays, and the optimized mode will say why it cannot run. Returns a note.
pub fn find_optimizable(session: &mut Session, t: &mut Target) -> Option<String> {
    let first = t.offset.clone().ok()?;
    session.optimization()?;
    session.debugfs("kprobes/list")?;
    session.set_optimization(true).ok()?;
    for off in first..first + SEARCH_BYTES {
        // Not optimizable, or no instruction boundary: the next byte.
        if optimizable_at(session, t, off) == Ok(true) {
            t.offset = Ok(off);
            return Some(format!(
                "{}: int3 and optimized kprobes at +{off:#x}, the first instruction after the ftrace call site that the kernel jump-optimizes",
                t.symbol
            ));
        }
    }
    Some(format!(
        "{}: no instruction in +{first:#x}..+{:#x} is jump-optimizable; the kprobes stay at +{first:#x}",
        t.symbol,
        first + SEARCH_BYTES
    ))
}
