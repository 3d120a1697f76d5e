//! Placeholder: being written.
pub fn compare_command(_args: &crate::cli::CompareArgs) -> crate::Result<()> {
    Err(crate::Error::Usage("compare: not built yet".into()))
}
