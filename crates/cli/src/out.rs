//! Everything the command prints goes through here (`outln!`, `out!`,
//! `errln!`), so that a reader that goes away is handled in one place.
//!
//! Rust starts every program with SIGPIPE ignored, so a write to a pipe
//! whose reader has closed (`platter status | head -1`) fails with `EPIPE`,
//! and `println!` panics on that: a backtrace and exit 101. The usual cure,
//! putting SIGPIPE back to its default so that the kernel kills the
//! process, is wrong here on two counts: the server writes to sockets and
//! pipes of its own (clients, remote members, `--on-event` programs),
//! where a reader gone must be an error to handle, not the end of the
//! server; and a command that changes something while it prints (reshape
//! prints its plan, then writes every member's label) would die wherever
//! the signal found it. So SIGPIPE stays ignored, and what a closed
//! standard output does is decided per command, by what it would leave
//! behind ([`OnClosed`], chosen in `main`).
//!
//! A failed write to stderr never ends anything: messages there are
//! written where they can be, and dropped otherwise (`errln!`).

use std::fmt;
use std::io::{self, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// What the first failed write to stdout does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnClosed {
    /// End the process at once, quietly, with status [`CLOSED_STATUS`]
    /// (another error than a closed pipe, such as a full disk behind `>
    /// FILE`, is said in one line and gives status 1). For commands whose
    /// output is all they do (status, scan, stats, man, ...) and for the
    /// control socket's commands, which print the server's answer: the
    /// server has made the change before the answer is printed, and what
    /// may follow (`--wait`, `--watch`) only watches.
    Quit,
    /// Drop this and any later output and let the command finish; it exits
    /// with its own status. For commands that change something while they
    /// print (create, reshape, serve) or write files after printing (sweep's
    /// plot, sim's iologs and models): stopping them half-way would leave
    /// labels written on some members and not others, or a plot unwritten.
    /// Their output is lost, their work is not.
    Finish,
}

/// The status of a command ended by a closed stdout: 128 + SIGPIPE, what
/// a shell shows for a process SIGPIPE killed (`cat` into `head`).
pub const CLOSED_STATUS: i32 = 141;

const QUIT: u8 = 0;
const FINISH: u8 = 1;

static ON_CLOSED: AtomicU8 = AtomicU8::new(QUIT);
/// Stdout failed once: nothing more is written to it.
static LOST: AtomicBool = AtomicBool::new(false);

/// Sets what a closed stdout does for the rest of the run.
pub fn on_closed(what: OnClosed) {
    let v = match what {
        OnClosed::Quit => QUIT,
        OnClosed::Finish => FINISH,
    };
    ON_CLOSED.store(v, Ordering::SeqCst);
}

/// Whether stdout is a terminal (progress bars, screen clearing).
pub fn stdout_is_terminal() -> bool {
    io::stdout().is_terminal()
}

/// Writes to stdout and flushes, so that a reader gone is found at this
/// write, not at the exit. See [`OnClosed`] for what a failure does.
pub fn write_fmt(args: fmt::Arguments<'_>) {
    if LOST.load(Ordering::SeqCst) {
        return;
    }
    let mut stdout = io::stdout().lock();
    let written = stdout.write_fmt(args).and_then(|()| stdout.flush());
    drop(stdout);
    if let Err(e) = written {
        failed(&e);
    }
}

/// [`write_fmt`] of bytes as they are (a manual page, a completion script).
pub fn write_bytes(bytes: &[u8]) {
    if LOST.load(Ordering::SeqCst) {
        return;
    }
    let mut stdout = io::stdout().lock();
    let written = stdout.write_all(bytes).and_then(|()| stdout.flush());
    drop(stdout);
    if let Err(e) = written {
        failed(&e);
    }
}

/// Writes to stderr if it can; a closed or full stderr loses the message
/// and nothing else.
pub fn err_fmt(args: fmt::Arguments<'_>) {
    let mut stderr = io::stderr().lock();
    let _ = stderr.write_fmt(args).and_then(|()| stderr.flush());
}

fn failed(e: &io::Error) {
    // Only the first failure decides: later writes are dropped above.
    if LOST.swap(true, Ordering::SeqCst) {
        return;
    }
    let closed = e.kind() == io::ErrorKind::BrokenPipe;
    let quit = ON_CLOSED.load(Ordering::SeqCst) == QUIT;
    // A reader gone is said by the exit status alone; anything else (a
    // full disk behind `> FILE`) in one line.
    match (closed, quit) {
        (true, _) => {}
        (false, true) => err_fmt(format_args!(
            "platter: error: cannot write to standard output: {e}\n"
        )),
        (false, false) => err_fmt(format_args!(
            "platter: warning: cannot write to standard output ({e}): the rest of the output \
             is lost; the command goes on\n"
        )),
    }
    if quit {
        // Nothing of this command is half-done (see `OnClosed::Quit`);
        // `exit` flushes what std buffers, and ignores that it fails.
        std::process::exit(if closed { CLOSED_STATUS } else { 1 });
    }
}

/// `println!` to stdout through [`write_fmt`].
macro_rules! outln {
    () => {
        $crate::out::write_fmt(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::write_fmt(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` to stdout through [`write_fmt`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::out::write_fmt(format_args!($($arg)*))
    };
}

/// `eprintln!` that never panics: see [`err_fmt`].
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::out::err_fmt(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprint!` that never panics: see [`err_fmt`].
macro_rules! err {
    ($($arg:tt)*) => {
        $crate::out::err_fmt(format_args!($($arg)*))
    };
}

pub(crate) use {err, errln, out, outln};
