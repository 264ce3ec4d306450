//! The publishers on the wire (SPEC.md §17.3): one ZeroMQ PUB socket per worker bound
//! on 127.0.0.1, and, when asked, one ROUTER replay socket each that answers as vLLM's
//! `ZmqEventPublisher` does. The sockets live on a thread of their own with a
//! single-threaded runtime, so a replay is answered while the caller waits for a router.

use super::plan::{Plan, Step};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::time::Duration;
use zeromq::{Socket, SocketRecv, SocketSend, ZmqMessage};

/// The messages a worker's replay socket still holds, `(seq, payload)` in order.
type Buffer = Arc<Mutex<Vec<(u64, Vec<u8>)>>>;

enum Command {
    Send {
        steps: Vec<Step>,
        join: Duration,
        timeout: Duration,
        reply: std_mpsc::Sender<Result<usize, String>>,
    },
}

/// Bound publishers, one per worker, and the thread that owns them.
pub struct Publishers {
    pub endpoints: Vec<String>,
    pub replay_endpoints: Vec<Option<String>>,
    commands: Option<tokio::sync::mpsc::UnboundedSender<Command>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Publishers {
    /// Binds a PUB socket (and with `replay` a ROUTER socket) per worker on ports of
    /// 127.0.0.1 the system chooses, or at `ports[i]` (and `ports[i] + workers`)
    /// when given; each bind waits at most `timeout`.
    pub fn bind(
        workers: usize,
        replay: bool,
        base_port: Option<u16>,
        timeout: Duration,
    ) -> Result<Publishers, String> {
        let (ready_tx, ready_rx) = std_mpsc::channel();
        let (commands, command_rx) = tokio::sync::mpsc::unbounded_channel();
        let thread = std::thread::Builder::new()
            .name("kvroute-publish".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = ready_tx
                            .send(Err(format!("cannot start the publishers' runtime: {e}")));
                        return;
                    }
                };
                runtime.block_on(serve(
                    workers, replay, base_port, timeout, ready_tx, command_rx,
                ));
            })
            .map_err(|e| format!("cannot start the publishers' thread: {e}"))?;
        let ready = ready_rx
            .recv()
            .unwrap_or_else(|_| Err("the publishers' thread ended before binding".to_string()));
        match ready {
            Ok((endpoints, replay_endpoints)) => Ok(Publishers {
                endpoints,
                replay_endpoints,
                commands: Some(commands),
                thread: Some(thread),
            }),
            Err(e) => {
                let _ = thread.join();
                Err(e)
            }
        }
    }

    /// Waits `join` for subscribers, then sends the plan's steps in order, each send
    /// bounded by `timeout`; the number of messages sent live.
    pub fn send(&self, plan: &Plan, join: Duration, timeout: Duration) -> Result<usize, String> {
        let (reply, answer) = std_mpsc::channel();
        let command = Command::Send {
            steps: plan.steps.clone(),
            join,
            timeout,
            reply,
        };
        let sender = self.commands.as_ref().ok_or("the publishers are stopped")?;
        sender
            .send(command)
            .map_err(|_| "the publishers' thread has ended".to_string())?;
        answer
            .recv()
            .unwrap_or_else(|_| Err("the publishers' thread ended while sending".to_string()))
    }
}

impl Drop for Publishers {
    /// Closing the command channel ends the thread, which closes every socket.
    fn drop(&mut self) {
        self.commands.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

type Bound = (Vec<String>, Vec<Option<String>>);

async fn serve(
    workers: usize,
    replay: bool,
    base_port: Option<u16>,
    timeout: Duration,
    ready: std_mpsc::Sender<Result<Bound, String>>,
    mut commands: tokio::sync::mpsc::UnboundedReceiver<Command>,
) {
    let mut pubs = Vec::new();
    let mut endpoints = Vec::new();
    let mut replay_endpoints = Vec::new();
    let buffers: Vec<Buffer> = (0..workers).map(|_| Buffer::default()).collect();
    let mut replay_tasks = Vec::new();
    let port = |i: usize| base_port.map_or(0, |p| p as usize + i);
    for (i, buffer) in buffers.iter().enumerate() {
        let mut socket = zeromq::PubSocket::new();
        match bind(
            &mut socket,
            &format!("tcp://127.0.0.1:{}", port(i)),
            timeout,
        )
        .await
        {
            Ok(endpoint) => endpoints.push(endpoint),
            Err(e) => return drop(ready.send(Err(e))),
        }
        pubs.push(socket);
        if replay {
            let mut router = zeromq::RouterSocket::new();
            match bind(
                &mut router,
                &format!("tcp://127.0.0.1:{}", port(workers + i)),
                timeout,
            )
            .await
            {
                Ok(endpoint) => replay_endpoints.push(Some(endpoint)),
                Err(e) => return drop(ready.send(Err(e))),
            }
            replay_tasks.push(tokio::spawn(answer_replays(router, buffer.clone())));
        } else {
            replay_endpoints.push(None);
        }
    }
    if ready
        .send(Ok((endpoints.clone(), replay_endpoints)))
        .is_err()
    {
        return;
    }
    while let Some(Command::Send {
        steps,
        join,
        timeout,
        reply,
    }) = commands.recv().await
    {
        let sent = send_steps(&mut pubs, &endpoints, &buffers, steps, join, timeout).await;
        let _ = reply.send(sent);
    }
    for task in replay_tasks {
        task.abort();
    }
    for socket in pubs {
        socket.close().await;
    }
}

async fn bind<S: Socket>(
    socket: &mut S,
    endpoint: &str,
    timeout: Duration,
) -> Result<String, String> {
    match tokio::time::timeout(timeout, socket.bind(endpoint)).await {
        Ok(Ok(bound)) => Ok(bound.to_string()),
        Ok(Err(e)) => Err(format!("cannot bind {endpoint}: {e}")),
        Err(_) => Err(format!(
            "binding {endpoint} took longer than {} ms",
            timeout.as_millis()
        )),
    }
}

async fn send_steps(
    pubs: &mut [zeromq::PubSocket],
    endpoints: &[String],
    buffers: &[Buffer],
    steps: Vec<Step>,
    join: Duration,
    timeout: Duration,
) -> Result<usize, String> {
    tokio::time::sleep(join).await;
    let mut sent = 0;
    for step in steps {
        match step {
            Step::Message {
                worker,
                seq,
                payload,
                live,
                buffered,
            } => {
                if buffered {
                    buffers[worker]
                        .lock()
                        .expect("a replay buffer")
                        .push((seq, payload.clone()));
                }
                if live {
                    let message = frames(&seq.to_be_bytes(), payload);
                    match tokio::time::timeout(timeout, pubs[worker].send(message)).await {
                        Ok(Ok(())) => sent += 1,
                        Ok(Err(e)) => {
                            return Err(format!(
                                "{}: sending message {seq}: {e}",
                                endpoints[worker]
                            ))
                        }
                        Err(_) => {
                            return Err(format!(
                                "{}: sending message {seq} timed out",
                                endpoints[worker]
                            ))
                        }
                    }
                }
            }
            Step::Restart { worker } => {
                let old = std::mem::replace(&mut pubs[worker], zeromq::PubSocket::new());
                old.close().await;
                buffers[worker].lock().expect("a replay buffer").clear();
                rebind(&mut pubs[worker], &endpoints[worker], timeout).await?;
                tokio::time::sleep(join).await;
            }
        }
    }
    Ok(sent)
}

/// Binds a restarted publisher on its old endpoint, retrying while the port is still
/// being released, for at most `timeout`.
async fn rebind(
    socket: &mut zeromq::PubSocket,
    endpoint: &str,
    timeout: Duration,
) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match socket.bind(endpoint).await {
            Ok(_) => return Ok(()),
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(format!("cannot bind {endpoint} again after a restart: {e}"))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// `[topic, seq, payload]` with the empty topic.
fn frames(seq: &[u8], payload: Vec<u8>) -> ZmqMessage {
    let mut message = ZmqMessage::from(Vec::<u8>::new());
    message.push_back(seq.to_vec().into());
    message.push_back(payload.into());
    message
}

/// Answers each replay request `[identity, "", start seq]` with every buffered message
/// from that seq on, `[identity, "", topic, seq, payload]`, then the end marker
/// `[identity, "", "", -1, ""]`, as vLLM 0.26.0 and later answer (SPEC.md §13.1).
async fn answer_replays(mut router: zeromq::RouterSocket, buffer: Buffer) {
    while let Ok(request) = router.recv().await {
        let frames_in = request.into_vec();
        let (Some(identity), Some(start)) = (frames_in.first(), frames_in.last()) else {
            continue;
        };
        let Ok(start) = <[u8; 8]>::try_from(start.as_ref()) else {
            continue;
        };
        let start = u64::from_be_bytes(start);
        let answers: Vec<(u64, Vec<u8>)> = buffer
            .lock()
            .expect("a replay buffer")
            .iter()
            .filter(|(seq, _)| *seq >= start)
            .cloned()
            .collect();
        let end = (u64::MAX.to_be_bytes(), Vec::new());
        for (seq, payload) in answers
            .into_iter()
            .map(|(s, p)| (s.to_be_bytes(), p))
            .chain([end])
        {
            let mut message = ZmqMessage::from(identity.clone());
            message.push_back(Vec::<u8>::new().into());
            message.push_back(Vec::<u8>::new().into());
            message.push_back(seq.to_vec().into());
            message.push_back(payload.into());
            if router.send(message).await.is_err() {
                break;
            }
        }
    }
}
