//! Connections into the node's network namespace. A containerd of `skiff up` runs in a
//! network namespace of its own, so that the bridges and rules CNI makes never touch the
//! host's network; its pods' addresses and its streaming server (exec, attach) are reached
//! there. A socket belongs to the namespace it was made in, so a connection is made on a
//! thread of its own that has joined the namespace, and then used from anywhere.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::net::TcpStream;

/// A TCP connection to `addr` within `timeout`, made in the network namespace at `netns`
/// (`/proc/<pid>/ns/net`), or in this process's own when none is given.
pub async fn connect(
    netns: Option<&Path>,
    addr: SocketAddr,
    timeout: Duration,
) -> std::io::Result<TcpStream> {
    let timed_out = || {
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("{addr}: no connection within {timeout:?}"),
        )
    };
    let Some(netns) = netns else {
        return tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| timed_out())?;
    };
    let stream = in_netns(netns, "netns-connect", move || {
        let stream = std::net::TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_nonblocking(true)?;
        Ok(stream)
    })
    .await?;
    TcpStream::from_std(stream)
}

/// Runs `make` on a thread (`name`) that has joined the network namespace at `netns`, and
/// returns what it made (a socket, which stays in that namespace wherever it is used). The
/// thread ends with it: nothing else ever runs in the namespace it joined.
async fn in_netns<T: Send + 'static>(
    netns: &Path,
    name: &str,
    make: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    let netns: PathBuf = netns.to_owned();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let made = (|| {
                use std::os::fd::AsFd as _;
                let ns = std::fs::File::open(&netns)?;
                nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
                    .map_err(std::io::Error::from)?;
                make()
            })();
            let _ = tx.send(made);
        })?;
    rx.await
        .map_err(|_| std::io::Error::other(format!("{name}: the thread ended without an answer")))?
}

/// A UDP socket bound to `addr` (`IP_FREEBIND`: the address may not be there yet, as the
/// node's bridge address is not until its first pod), non-blocking.
fn bind_freely(addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM.cloexec(), None)?;
    if addr.is_ipv4() {
        socket.set_freebind_v4(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// A UDP socket bound to `addr` in the network namespace at `netns` (this process's own when
/// none is given); the address need not exist yet.
pub async fn bind_udp(
    netns: Option<&Path>,
    addr: SocketAddr,
) -> std::io::Result<tokio::net::UdpSocket> {
    let Some(netns) = netns else {
        return tokio::net::UdpSocket::from_std(bind_freely(addr)?);
    };
    let socket = in_netns(netns, "netns-bind", move || bind_freely(addr)).await?;
    tokio::net::UdpSocket::from_std(socket)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An address the node does not have yet (its bridge's, before the first pod) can be
    /// bound, and the socket answers once it is reachable.
    #[tokio::test]
    async fn an_address_not_there_yet_can_be_bound() {
        let early = bind_udp(None, "192.0.2.53:0".parse().expect("addr")).await;
        assert!(early.is_ok(), "{early:?}");
        let socket = bind_udp(None, "127.0.0.1:0".parse().expect("addr"))
            .await
            .expect("loopback");
        let to = socket.local_addr().expect("addr");
        let client = tokio::net::UdpSocket::bind("127.0.0.1:0")
            .await
            .expect("client");
        client.send_to(b"ping", to).await.expect("send");
        let mut buf = [0u8; 4];
        let (n, _) = socket.recv_from(&mut buf).await.expect("recv");
        assert_eq!(&buf[..n], b"ping");
    }
}
