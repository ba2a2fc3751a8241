//! The memory server's frame decoder on arbitrary bytes, as a connection would deliver them:
//! frames one after another, each decoded as a request (what the server does) and as a reply
//! (what a client does). Nothing may panic, allocate past the frame limit or loop; a request
//! that decodes must encode back to a frame that decodes to the same request.

#![no_main]

use std::io::Cursor;

use libfuzzer_sys::fuzz_target;
use swap_backend::protocol::{read_frame, Reply, Request, MAX_PAYLOAD};

fuzz_target!(|data: &[u8]| {
    let mut stream = Cursor::new(data);
    let mut payload = Vec::new();
    while let Ok(h) = read_frame(&mut stream, &mut payload) {
        assert!(payload.len() == h.len as usize && payload.len() <= MAX_PAYLOAD);
        if let Ok(req) = Request::decode(h.op, &payload) {
            let mut encoded = Vec::new();
            req.write_to(&mut encoded, h.request).unwrap();
            let mut again = Vec::new();
            let h2 = read_frame(&mut Cursor::new(&encoded[..]), &mut again)
                .expect("an encoded request is a frame");
            assert_eq!((h2.op, h2.request), (h.op, h.request));
            assert_eq!(Request::decode(h2.op, &again).as_ref(), Ok(&req));
        }
        let _ = Reply::decode(h.op, &payload);
    }
});
