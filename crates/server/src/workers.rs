//! A fixed pool of threads that run requests through the engine. Member I/O
//! blocks, so it runs here and never on a connection's reader.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

pub type Job = Box<dyn FnOnce() + Send>;

pub struct Workers {
    tx: Option<SyncSender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl Workers {
    /// `queue` bounds jobs waiting for a thread; senders block beyond it.
    pub fn new(threads: usize, queue: usize) -> Workers {
        assert!(threads > 0);
        let (tx, rx) = sync_channel::<Job>(queue);
        let rx = Arc::new(Mutex::new(rx));
        let threads = (0..threads)
            .map(|i| {
                let rx: Arc<Mutex<Receiver<Job>>> = Arc::clone(&rx);
                std::thread::Builder::new()
                    .name(format!("platter-worker-{i}"))
                    .spawn(move || loop {
                        let job = rx.lock().expect("worker queue").recv();
                        match job {
                            Ok(job) => job(),
                            Err(_) => return,
                        }
                    })
                    .expect("spawn worker thread")
            })
            .collect();
        Workers {
            tx: Some(tx),
            threads,
        }
    }

    pub fn sender(&self) -> SyncSender<Job> {
        self.tx.clone().expect("pool is running")
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.tx.take();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
