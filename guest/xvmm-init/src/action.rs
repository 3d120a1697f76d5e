//! `xvmm.init=ACTION` on the guest kernel command line.

/// What `xvmm-init` does after printing its marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Write the status byte to the VMM's exit port (PORT_EXIT).
    Exit(u8),
    /// `reboot(RB_AUTOBOOT)`: with `reboot=k` the kernel resets through the
    /// i8042, with `reboot=t` it triple-faults.
    Reboot,
    /// `reboot(RB_POWER_OFF)`: without ACPI the kernel just halts.
    Poweroff,
    /// Do nothing forever (the VMM's timeout has to end the run).
    Hang,
}

/// Command-line parameter naming the action.
pub const PARAM: &str = "xvmm.init";

/// Used when the command line names no action.
pub const DEFAULT: Action = Action::Exit(0);

impl Action {
    pub fn parse(value: &str) -> Result<Action, String> {
        match value {
            "reboot" => Ok(Action::Reboot),
            "poweroff" => Ok(Action::Poweroff),
            "hang" => Ok(Action::Hang),
            _ => {
                let code = value
                    .strip_prefix("exit:")
                    .ok_or_else(|| format!("unknown {PARAM} action {value:?}"))?;
                code.parse::<u8>()
                    .map(Action::Exit)
                    .map_err(|_| format!("{PARAM}=exit:N needs N in 0..=255, got {code:?}"))
            }
        }
    }

    /// The action named by the last `xvmm.init=` in `cmdline` (the kernel
    /// also lets later parameters win), or [`DEFAULT`].
    pub fn from_cmdline(cmdline: &str) -> Result<Action, String> {
        let prefix = format!("{PARAM}=");
        match cmdline
            .split_whitespace()
            .rev()
            .find_map(|w| w.strip_prefix(prefix.as_str()))
        {
            Some(v) => Action::parse(v),
            None => Ok(DEFAULT),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_action() {
        assert_eq!(Action::parse("exit:0"), Ok(Action::Exit(0)));
        assert_eq!(Action::parse("exit:255"), Ok(Action::Exit(255)));
        assert_eq!(Action::parse("reboot"), Ok(Action::Reboot));
        assert_eq!(Action::parse("poweroff"), Ok(Action::Poweroff));
        assert_eq!(Action::parse("hang"), Ok(Action::Hang));
    }

    #[test]
    fn rejects_bad_actions() {
        assert!(Action::parse("exit:256").unwrap_err().contains("0..=255"));
        assert!(Action::parse("exit:").is_err());
        assert!(Action::parse("halt").unwrap_err().contains("unknown"));
    }

    #[test]
    fn reads_last_param_from_cmdline() {
        let c = "console=ttyS0 xvmm.init=hang reboot=k xvmm.init=exit:3\n";
        assert_eq!(Action::from_cmdline(c), Ok(Action::Exit(3)));
        assert_eq!(
            Action::from_cmdline("console=ttyS0 xvmm.initx=hang"),
            Ok(DEFAULT)
        );
        assert_eq!(Action::from_cmdline(""), Ok(DEFAULT));
    }
}
