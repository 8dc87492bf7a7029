//! Standard output that a closed pipe (`mesh build | head -1`) ends quietly instead of with a
//! panic: the command has done its work; the reader just stopped listening.

use std::io::Write;

/// Writes to standard output; exits with 141 (as a shell reports SIGPIPE) if the reader is gone.
pub fn out(text: std::fmt::Arguments<'_>) {
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(text).and_then(|()| stdout.flush()) {
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
