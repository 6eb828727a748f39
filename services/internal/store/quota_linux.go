package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Btrfs quota ioctls and structs, with the layouts of linux/btrfs.h and the quota tree's item keys
// of linux/btrfs_tree.h. quota_test.go pins every size and number.
const (
	iocSync         = 0x00009408 // _IO(0x94, 8)
	iocTreeSearch   = 0xd0009411 // _IOWR(0x94, 17, btrfs_ioctl_search_args)
	iocQuotaCtl     = 0xc0109428 // _IOWR(0x94, 40, btrfs_ioctl_quota_ctl_args)
	iocQgroupAssign = 0x40189429 // _IOW(0x94, 41, btrfs_ioctl_qgroup_assign_args)
	iocQgroupCreate = 0x4010942a // _IOW(0x94, 42, btrfs_ioctl_qgroup_create_args)
	iocQgroupLimit  = 0x8030942b // _IOR(0x94, 43, btrfs_ioctl_qgroup_limit_args): _IOR in the uapi, though it writes

	quotaCtlEnableSimple = 4 // BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA (kernel >= 6.7)

	limitMaxRfer = 1 << 0 // BTRFS_QGROUP_LIMIT_MAX_RFER
	limitMaxExcl = 1 << 1 // BTRFS_QGROUP_LIMIT_MAX_EXCL

	quotaTreeObjID    = 8   // BTRFS_QUOTA_TREE_OBJECTID
	qgroupStatusKey   = 240 // BTRFS_QGROUP_STATUS_KEY
	qgroupInfoKey     = 242 // BTRFS_QGROUP_INFO_KEY
	qgroupLimitKey    = 244 // BTRFS_QGROUP_LIMIT_KEY
	qgroupRelationKey = 246 // BTRFS_QGROUP_RELATION_KEY

	statusFlagOn           = 1 << 0 // BTRFS_QGROUP_STATUS_FLAG_ON
	statusFlagInconsistent = 1 << 2 // BTRFS_QGROUP_STATUS_FLAG_INCONSISTENT
	statusFlagSimple       = 1 << 3 // BTRFS_QGROUP_STATUS_FLAG_SIMPLE_MODE
)

type quotaCtlArgs struct { // btrfs_ioctl_quota_ctl_args
	cmd    uint64
	status uint64
}

type qgroupAssignArgs struct { // btrfs_ioctl_qgroup_assign_args
	assign uint64 // 1 add the relation, 0 remove it
	src    uint64 // child
	dst    uint64 // parent
}

type qgroupCreateArgs struct { // btrfs_ioctl_qgroup_create_args
	create   uint64 // 1 create, 0 destroy
	qgroupid uint64
}

type qgroupLimit struct { // btrfs_qgroup_limit
	flags   uint64
	maxRfer uint64
	maxExcl uint64
	rsvRfer uint64
	rsvExcl uint64
}

type qgroupLimitArgs struct { // btrfs_ioctl_qgroup_limit_args
	qgroupid uint64
	lim      qgroupLimit
}

type searchKey struct { // btrfs_ioctl_search_key
	treeID                   uint64
	minObjectID, maxObjectID uint64
	minOffset, maxOffset     uint64
	minTransID, maxTransID   uint64
	minType, maxType         uint32
	nrItems                  uint32
	_                        uint32
	_                        [4]uint64
}

type searchHeader struct { // btrfs_ioctl_search_header
	transid  uint64
	objectid uint64
	offset   uint64
	typ      uint32
	len      uint32
}

type searchArgs struct { // btrfs_ioctl_search_args
	key searchKey
	buf [4096 - unsafe.Sizeof(searchKey{})]byte
}

// qgroupID is a qgroup's id, level<<48 | id, written "level/id" by btrfs-progs.
type qgroupID uint64

func mkQgroup(level uint16, id uint64) qgroupID { return qgroupID(uint64(level)<<48 | id) }
func (q qgroupID) level() uint16                { return uint16(q >> 48) }
func (q qgroupID) String() string               { return fmt.Sprintf("%d/%d", q>>48, uint64(q)&(1<<48-1)) }

// fsSync commits the filesystem of fd and wakes its cleaner, which reclaims deleted subvolumes
// (and so gives their space back to their qgroups) without waiting for the next commit.
func fsSync(fd int) error {
	if err := ioctl(fd, iocSync, nil); err != nil {
		return fmt.Errorf("btrfs sync: %w", err)
	}
	return nil
}

// quotaEnableSimple turns on simple quotas on the filesystem of fd. It is a no-op when quotas of
// either mode are on already: quotaStatus tells which.
func quotaEnableSimple(fd int) error {
	a := quotaCtlArgs{cmd: quotaCtlEnableSimple}
	if err := ioctl(fd, iocQuotaCtl, unsafe.Pointer(&a)); err != nil {
		return fmt.Errorf("enable simple quotas: %w", err)
	}
	return nil
}

// qgroupCreate creates qgroup q; one that exists already is fine.
func qgroupCreate(fd int, q qgroupID) error {
	a := qgroupCreateArgs{create: 1, qgroupid: uint64(q)}
	if err := ioctl(fd, iocQgroupCreate, unsafe.Pointer(&a)); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("create qgroup %s: %w", q, err)
	}
	return nil
}

// qgroupDestroy removes qgroup q; the kernel refuses (EBUSY) while it has members or usage.
func qgroupDestroy(fd int, q qgroupID) error {
	a := qgroupCreateArgs{create: 0, qgroupid: uint64(q)}
	if err := ioctl(fd, iocQgroupCreate, unsafe.Pointer(&a)); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("destroy qgroup %s: %w", q, err)
	}
	return nil
}

// qgroupAssign makes child a member of parent (or, with add false, no longer one). The kernel
// adds the child's usage to the parent's at once: simple quotas keep exclusive = referenced.
func qgroupAssign(fd int, child, parent qgroupID, add bool) error {
	a := qgroupAssignArgs{src: uint64(child), dst: uint64(parent)}
	if add {
		a.assign = 1
	}
	err := ioctl(fd, iocQgroupAssign, unsafe.Pointer(&a))
	if err != nil && !(add && errors.Is(err, unix.EEXIST)) && !(!add && errors.Is(err, unix.ENOENT)) {
		return fmt.Errorf("assign qgroup %s to %s: %w", child, parent, err)
	}
	return nil
}

// qgroupSetLimit sets q's limit in bytes (0: none). Under simple quotas referenced and exclusive
// are the same figure; both are limited.
func qgroupSetLimit(fd int, q qgroupID, bytes int64) error {
	a := qgroupLimitArgs{qgroupid: uint64(q), lim: qgroupLimit{flags: limitMaxRfer | limitMaxExcl}}
	if bytes > 0 {
		a.lim.maxRfer, a.lim.maxExcl = uint64(bytes), uint64(bytes)
	} else {
		a.lim.maxRfer, a.lim.maxExcl = ^uint64(0), ^uint64(0) // what "btrfs qgroup limit none" sets
	}
	if err := ioctl(fd, iocQgroupLimit, unsafe.Pointer(&a)); err != nil {
		return fmt.Errorf("limit qgroup %s: %w", q, err)
	}
	return nil
}

// quotaItem is one item of the quota tree.
type quotaItem struct {
	objectid, offset uint64
	typ              uint32
	data             []byte
}

// searchQuotaTree returns the quota tree's items from (objectid, minType, minOff) to
// (objectid, maxType, maxOff), in key order. The tree is what the last transaction committed.
func searchQuotaTree(fd int, objectid uint64, minType, maxType uint32, minOff, maxOff uint64) ([]quotaItem, error) {
	var out []quotaItem
	a := &searchArgs{}
	a.key = searchKey{treeID: quotaTreeObjID, minObjectID: objectid, maxObjectID: objectid,
		minOffset: minOff, maxOffset: maxOff, maxTransID: ^uint64(0), minType: minType, maxType: maxType}
	for {
		a.key.nrItems = 4096
		if err := ioctl(fd, iocTreeSearch, unsafe.Pointer(a)); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil, fmt.Errorf("search the quota tree: %w (quotas are off)", err)
			}
			return nil, fmt.Errorf("search the quota tree: %w", err)
		}
		n := a.key.nrItems
		if n == 0 {
			return out, nil
		}
		var h searchHeader
		off := 0
		for range n {
			h = *(*searchHeader)(unsafe.Pointer(&a.buf[off]))
			off += int(unsafe.Sizeof(h))
			if off+int(h.len) > len(a.buf) {
				return nil, errors.New("BUG: tree search item runs past the buffer")
			}
			out = append(out, quotaItem{objectid: h.objectid, offset: h.offset, typ: h.typ,
				data: append([]byte(nil), a.buf[off:off+int(h.len)]...)})
			off += int(h.len)
		}
		// Continue after the last key (keys compare as (objectid, type, offset)).
		switch {
		case h.offset < ^uint64(0):
			a.key.minType, a.key.minOffset = h.typ, h.offset+1
		case h.typ < maxType:
			a.key.minType, a.key.minOffset = h.typ+1, 0
		default:
			return out, nil
		}
		if a.key.minType == maxType && a.key.minOffset > maxOff {
			return out, nil
		}
	}
}

// quotaStatus reads the quota tree's status item: whether quotas are on and in which mode.
func quotaStatus(fd int) (on, simple, inconsistent bool, err error) {
	items, err := searchQuotaTree(fd, 0, qgroupStatusKey, qgroupStatusKey, 0, 0)
	if errors.Is(err, unix.ENOENT) {
		return false, false, false, nil
	}
	if err != nil || len(items) == 0 || len(items[0].data) < 24 {
		return false, false, false, err
	}
	flags := binary.LittleEndian.Uint64(items[0].data[16:]) // version, generation, flags, ...
	return flags&statusFlagOn != 0, flags&statusFlagSimple != 0, flags&statusFlagInconsistent != 0, nil
}

// qgroupUsage is a qgroup's usage and limit as the quota tree holds them.
type qgroupUsage struct {
	Referenced, Exclusive uint64
	Limit                 uint64 // 0: none
}

// readQgroup returns q's usage (btrfs_qgroup_info_item) and limit (btrfs_qgroup_limit_item).
func readQgroup(fd int, q qgroupID) (qgroupUsage, error) {
	le := binary.LittleEndian
	var u qgroupUsage
	info, err := searchQuotaTree(fd, 0, qgroupInfoKey, qgroupInfoKey, uint64(q), uint64(q))
	if err != nil {
		return u, err
	}
	if len(info) != 1 || len(info[0].data) < 40 { // generation, rfer, rfer_cmpr, excl, excl_cmpr
		return u, fmt.Errorf("qgroup %s: %w", q, unix.ENOENT)
	}
	u.Referenced, u.Exclusive = le.Uint64(info[0].data[8:]), le.Uint64(info[0].data[24:])
	lim, err := searchQuotaTree(fd, 0, qgroupLimitKey, qgroupLimitKey, uint64(q), uint64(q))
	if err != nil {
		return u, err
	}
	if len(lim) == 1 && len(lim[0].data) >= 24 { // flags, max_rfer, max_excl, rsv_rfer, rsv_excl
		if flags, max := le.Uint64(lim[0].data), le.Uint64(lim[0].data[8:]); flags&limitMaxRfer != 0 && max != ^uint64(0) {
			u.Limit = max
		}
	}
	return u, nil
}

// qgroupMembers returns the qgroups that are members of q (relation items (q, child)).
func qgroupMembers(fd int, q qgroupID) ([]qgroupID, error) {
	items, err := searchQuotaTree(fd, uint64(q), qgroupRelationKey, qgroupRelationKey, 0, uint64(q)-1)
	var out []qgroupID
	for _, it := range items {
		out = append(out, qgroupID(it.offset)) // (parent, child) items have child < parent
	}
	return out, err
}
