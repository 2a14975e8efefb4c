//! A subdisk through the member's own calls: offsets moved by the window,
//! bounds kept, errors named for the subdisk.

use std::sync::Arc;

use platter_io::error::MemberErrorKind;
use platter_io::member::Member;
use platter_io::memory::MemoryMember;
use platter_io::subdisk::SubdiskMember;

#[test]
fn a_subdisk_is_its_window_of_the_drive_and_nothing_else() {
    let drive: Arc<dyn Member> = Arc::new(MemoryMember::new("drive", 4 << 20));
    let sd = SubdiskMember::new(
        Arc::clone(&drive),
        1 << 20,
        1 << 20,
        "v.p0.s0 on drive".into(),
    )
    .unwrap();
    assert_eq!(sd.size_bytes(), 1 << 20);
    sd.write_parts_at(0, &[&[1; 512], &[2; 512]]).unwrap();
    sd.write_at((1 << 20) - 512, &[3; 512]).unwrap();
    let mut got = vec![0; 1024];
    drive.read_at(1 << 20, &mut got).unwrap();
    assert_eq!(
        (&got[..512], &got[512..]),
        (&[1u8; 512][..], &[2u8; 512][..])
    );
    drive.read_at((2 << 20) - 512, &mut got[..512]).unwrap();
    assert_eq!(&got[..512], &[3u8; 512][..]);
    sd.trim(0, 512).unwrap();
    sd.read_at(0, &mut got[..512]).unwrap();
    assert!(got[..512].iter().all(|&b| b == 0));

    let err = sd.write_at(1 << 20, &[9; 1]).unwrap_err();
    assert_eq!(err.kind, MemberErrorKind::OutOfRange);
    assert_eq!(err.member, "v.p0.s0 on drive");
    let mut beyond = [0u8; 1];
    drive.read_at(2 << 20, &mut beyond).unwrap();
    assert_eq!(beyond, [0], "nothing written past the window");
    assert!(SubdiskMember::new(drive, 3 << 20, 2 << 20, "too far".into()).is_err());
}
