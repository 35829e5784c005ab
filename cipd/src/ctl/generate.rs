//! `generate-docs`, hidden in both binaries: the man page (clap_mangen) and the shell
//! completions (clap_complete: bash, zsh, fish) of a command, rendered from its clap
//! definition, for packages to install.

use std::path::Path;

use anyhow::Context as _;
use clap_complete::Shell;

/// Writes `<name>.1` and `<name>.bash`, `_<name>` (zsh) and `<name>.fish` for `cmd` into
/// `dir` (created when missing), through [`crate::sys::durable`].
///
/// # Errors
/// When a file cannot be rendered or written.
pub fn write_docs(mut cmd: clap::Command, dir: &Path) -> anyhow::Result<()> {
    let name = cmd.get_name().to_owned();
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .render(&mut page)
        .with_context(|| format!("cannot render the man page of {name}"))?;
    write(dir, &format!("{name}.1"), &page)?;
    for (shell, file) in [
        (Shell::Bash, format!("{name}.bash")),
        (Shell::Zsh, format!("_{name}")),
        (Shell::Fish, format!("{name}.fish")),
    ] {
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut cmd, name.clone(), &mut script);
        write(dir, &file, &script)?;
    }
    Ok(())
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> anyhow::Result<()> {
    let path = dir.join(name);
    crate::sys::durable::write(&path, bytes)
        .with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_man_page_and_three_completions() {
        let dir = tempfile::tempdir().unwrap();
        let cmd = clap::Command::new("demo")
            .about("A demo")
            .subcommand(clap::Command::new("run").about("Runs"));
        write_docs(cmd, dir.path()).unwrap();
        let page = std::fs::read_to_string(dir.path().join("demo.1")).unwrap();
        assert!(page.contains(".TH demo"), "{page}");
        assert!(page.contains("run"), "{page}");
        for f in ["demo.bash", "_demo", "demo.fish"] {
            let text = std::fs::read_to_string(dir.path().join(f)).unwrap();
            assert!(text.contains("demo"), "{f}");
        }
    }
}
