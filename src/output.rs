//! Standard output that a closed pipe (`mesh build | head -1`) ends quietly instead of with a
//! panic: the command has done its work; the reader just stopped listening.

use std::io::Write;

/// Writes to standard output; exits with 141 (as a shell reports SIGPIPE) if the reader is gone.
///
/// What is printed holds values from outside (names, a Docker or nft answer, a process's name):
/// a character that could make the output lie to the person reading it (an escape sequence, a
/// carriage return, a bidirectional override) is written as an escape. Lines and tabs stay: the
/// values that could hold a newline are refused where they enter (paths, names) or escaped
/// where they are printed.
pub fn out(text: std::fmt::Arguments<'_>) {
    let text = text.to_string();
    let text = mesh_lib::text::escape_keeping_lines(&text);
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(141);
        }
        eprintln!("cannot write to standard output: {e}");
        std::process::exit(3);
    }
}

/// `println!` through [`out`].
macro_rules! say {
    () => { $crate::output::out(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::output::out(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `print!` through [`out`].
macro_rules! say_raw {
    ($($arg:tt)*) => { $crate::output::out(format_args!($($arg)*)) };
}
