//! Placeholder: being written.
pub fn run(_args: &crate::cli::RunArgs) -> crate::Result<()> {
    Err(crate::Error::Usage("linux guests: not built yet".into()))
}
