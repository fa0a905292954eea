"""Memory reached by address inside the compiled kernels (numba intrinsics).

Inside compiled code, a call that passes an array costs an atomic increment and decrement of the
array's reference count wherever numba cannot prove the pair useless, as it cannot around a helper
with a loop of its own: ~9 ns a call, more than MurmurHash3 of a short token (the token hashes of
a 3.5 kB text took 9.5 us so, 4.1 without, in a scratch timing). A helper called for every token
or value therefore takes the buffer's address, an integer (:func:`address_of`), and reads and
writes through the loads and stores here, which compile to one machine instruction each and check
nothing: the caller's buffer must hold what they touch.

Take the address at each call (``helper(address_of(buf), ...)``; an intrinsic's own array argument
costs nothing): numba frees an array after its last use, so an address kept in a variable can
outlive its array (a first version did so, and the identity test caught the stale reads).

:func:`copy_into` copies items between arrays with one ``memmove`` (numba's slice assignment
copies an item at a time).

:func:`prefetch` asks the CPU to start loading an array item's cache line: a lookup of many keys
in a table larger than the caches (an article's ~37 LSH buckets) issues every load first, then
probes, so the misses overlap instead of following one another.

Only read by numba when it compiles the kernels (:func:`stream_dedup.jit.compiling`); public
``numba.extending.intrinsic``, a few lines of LLVM each. Byte offsets for the byte and unaligned
loads; item indexes for the uint64 items. x86-64 and arm64 are little-endian, as
:func:`load_u64_unaligned` says its value is.
"""

from __future__ import annotations

from .jit import compiling

if compiling():
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    def _byte_pointer(context, builder, signature, args, bits):  # noqa: ANN001, ANN202 - numba codegen
        """``args[0] + args[1]`` (address, byte offset) as a pointer to a ``bits``-bit integer."""
        at = builder.add(args[0], context.cast(builder, args[1], signature.args[1], types.int64))
        return builder.inttoptr(at, ir.IntType(bits).as_pointer())

    def _item_pointer(context, builder, signature, args):  # noqa: ANN001, ANN202 - numba codegen
        """Item ``args[1]`` of the uint64 array at address ``args[0]``."""
        base = builder.inttoptr(args[0], ir.IntType(64).as_pointer())
        return builder.gep(base, [context.cast(builder, args[1], signature.args[1], types.int64)])

    @intrinsic
    def address_of(typingctx, arr):  # noqa: ARG001 - numba's signature
        """The address of an array's first element, an integer (see the module doc)."""
        if not isinstance(arr, types.Array):
            return None

        def codegen(context, builder, signature, args):
            data = context.make_array(signature.args[0])(context, builder, args[0]).data
            return builder.ptrtoint(data, ir.IntType(64))

        return types.int64(arr), codegen

    @intrinsic
    def load_u8(typingctx, address, offset):  # noqa: ARG001 - numba's signature
        """The byte at ``address + offset``."""
        if not isinstance(offset, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            return builder.load(_byte_pointer(context, builder, signature, args, 8))

        return types.uint8(types.int64, offset), codegen

    @intrinsic
    def store_u8(typingctx, address, offset, value):  # noqa: ARG001 - numba's signature
        """Set the byte at ``address + offset`` to ``value``."""
        if not isinstance(offset, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            byte = context.cast(builder, args[2], signature.args[2], types.uint8)
            builder.store(byte, _byte_pointer(context, builder, signature, args, 8))
            return context.get_dummy_value()

        return types.void(types.int64, offset, value), codegen

    @intrinsic
    def load_u64_unaligned(typingctx, address, offset):  # noqa: ARG001 - numba's signature
        """The 8 bytes at ``address + offset`` as a little-endian uint64 (one unaligned load)."""
        if not isinstance(offset, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            return builder.load(_byte_pointer(context, builder, signature, args, 64), align=1)

        return types.uint64(types.int64, offset), codegen

    @intrinsic
    def u64_item(typingctx, address, index):  # noqa: ARG001 - numba's signature
        """Item ``index`` of the uint64 array at ``address``."""
        if not isinstance(index, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            return builder.load(_item_pointer(context, builder, signature, args))

        return types.uint64(types.int64, index), codegen

    @intrinsic
    def set_u64_item(typingctx, address, index, value):  # noqa: ARG001 - numba's signature
        """Set item ``index`` of the uint64 array at ``address`` to ``value``."""
        if not isinstance(index, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            item = context.cast(builder, args[2], signature.args[2], types.uint64)
            builder.store(item, _item_pointer(context, builder, signature, args))
            return context.get_dummy_value()

        return types.void(types.int64, index, value), codegen

    @intrinsic
    def copy_into(typingctx, dst, at, src, start, n):  # noqa: ARG001 - numba's signature
        """``dst[at:at + n] = src[start:start + n]`` (contiguous arrays of one dtype; nothing copied if ``n`` <= 0)
        as one ``memmove``, unchecked: the caller's arrays must hold the items. numba's slice
        assignment copies an item at a time behind broadcasting's index checks (600 bytes in 0.195
        us, a scratch timing), and an element loop in its place, which LLVM vectorises (0.015 us),
        made the large kernel it was inlined into slower: its registers spilled."""
        if not (isinstance(dst, types.Array) and isinstance(src, types.Array) and dst.dtype == src.dtype
                and dst.layout == "C" and src.layout == "C" and all(isinstance(t, types.Integer) for t in (at, start, n))):
            return None

        def codegen(context, builder, signature, args):
            i64 = ir.IntType(64)
            to = context.make_array(signature.args[0])(context, builder, args[0]).data
            to = builder.gep(to, [context.cast(builder, args[1], signature.args[1], types.int64)])
            frm = context.make_array(signature.args[2])(context, builder, args[2]).data
            frm = builder.gep(frm, [context.cast(builder, args[3], signature.args[3], types.int64)])
            count = context.cast(builder, args[4], signature.args[4], types.int64)
            count = builder.select(builder.icmp_signed(">", count, ir.Constant(i64, 0)), count, ir.Constant(i64, 0))
            itemsize = context.get_abi_sizeof(context.get_data_type(signature.args[0].dtype))
            cgutils.raw_memmove(builder, to, frm, count, itemsize)
            return context.get_dummy_value()

        return types.void(dst, at, src, start, n), codegen

    @intrinsic
    def prefetch(typingctx, arr, index):  # noqa: ARG001 - numba's signature
        """Start loading the cache line of ``arr[index]`` (``llvm.prefetch``, for reading, kept in
        every cache level); a hint: it never faults, whatever ``index`` is."""
        if not isinstance(arr, types.Array) or not isinstance(index, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            data = context.make_array(signature.args[0])(context, builder, args[0]).data
            at = builder.gep(data, [context.cast(builder, args[1], signature.args[1], types.int64)])
            i8p = ir.IntType(8).as_pointer()
            i32 = ir.IntType(32)
            fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
            builder.call(fn, [builder.bitcast(at, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
            return context.get_dummy_value()

        return types.void(arr, index), codegen
