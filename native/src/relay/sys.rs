//! The system calls the relay makes, each result checked: clocks, eventfds, epoll, socket
//! options, writes, the kernel's RTT.

use std::os::fd::RawFd;

pub(super) use crate::stamps::mono_ns;



/// The kernel's smoothed RTT of a TCP socket in ns (Linux `TCP_INFO`'s `tcpi_rtt`, in µs), or None.
pub(super) fn tcp_rtt_ns(fd: RawFd) -> Option<i64> {
    let mut info = [0u8; 104];
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `info` and says how many
    let r = unsafe { libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, info.as_mut_ptr().cast(), &mut len) };
    if r != 0 || (len as usize) < TCP_INFO_RTT_OFFSET + 4 {
        return None;
    }
    let raw: [u8; 4] = info[TCP_INFO_RTT_OFFSET..TCP_INFO_RTT_OFFSET + 4].try_into().ok()?;
    Some(i64::from(u32::from_ne_bytes(raw)) * 1000)
}

/// struct tcp_info: 8 u8 fields, then u32s; tcpi_rtt is the 16th (as `proxy/session.py` reads it)
pub(super) const TCP_INFO_RTT_OFFSET: usize = 68;

/// Wakes whoever waits on an eventfd. Its only failure, EAGAIN (the counter at its top), leaves
/// the eventfd readable, which is all a wake is; any other is a bug of ours (a closed fd).
pub(super) fn bump(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a u64 that lives for the call; an eventfd takes exactly that
    let n = unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
    debug_assert!(n == 8 || std::io::Error::last_os_error().kind() == std::io::ErrorKind::WouldBlock);
}

/// Reads an eventfd's count (clears it): EAGAIN (nothing there) is a wake that another read took.
pub(super) fn clear(fd: RawFd) {
    let mut v: u64 = 0;
    // SAFETY: reads the eventfd's 8 bytes into a u64
    let n = unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
    debug_assert!(n == 8 || std::io::Error::last_os_error().kind() == std::io::ErrorKind::WouldBlock);
}

pub(super) fn epoll_set(ep: RawFd, op: libc::c_int, fd: RawFd, events: u32, token: u64) -> std::io::Result<()> {
    let mut ev = libc::epoll_event { events, u64: token };
    // SAFETY: ev lives for the call; the kernel checks the fds
    if unsafe { libc::epoll_ctl(ep, op, fd, &mut ev) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `fcntl(F_SETFL, O_NONBLOCK)`: a socket the relay reads must never block its thread. Set only
/// where it is not already (the event loop's sockets are: their duplicates share the flag).
pub(super) fn nonblocking(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: no pointers; the kernel checks the fd
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if fl >= 0 && fl & libc::O_NONBLOCK != 0 {
        return Ok(());
    }
    // SAFETY: as above
    if fl < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `setsockopt` of an int option to 1.
pub(super) fn sockopt_on(fd: RawFd, level: libc::c_int, name: libc::c_int) -> std::io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: a valid option value for the call's duration
    let r = unsafe { libc::setsockopt(fd, level, name, (&on as *const libc::c_int).cast(), 4) };
    if r < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
}

/// Writes what it can of `data` to `fd`: the count written, or the error (EAGAIN is 0 written).
pub(super) fn write_some(fd: RawFd, data: &[u8]) -> std::io::Result<usize> {
    let mut done = 0;
    while done < data.len() {
        // SAFETY: the pointer and length are a live slice's
        let n = unsafe { libc::send(fd, data[done..].as_ptr().cast(), data.len() - done, libc::MSG_NOSIGNAL) };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            match err.kind() {
                std::io::ErrorKind::WouldBlock => return Ok(done),
                std::io::ErrorKind::Interrupted => continue,
                _ => return Err(err),
            }
        }
        done += (n as usize).min(data.len() - done);
    }
    Ok(done)
}
