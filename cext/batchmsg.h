/* Batch messages on the Wire stream (proto/meshwire.proto) in gRPC's message framing,
 * encoded and decoded in C: pure, no I/O. cffi reads every line not starting with '#'.
 *
 * One message on the HTTP/2 stream is
 *     [compressed u8 = 0][length u32][Batch]        (gRPC length-prefixed message)
 *     Batch = [0x0A][varint n][n bytes]             (field 1, `bytes frames`)
 * and the n bytes are packed frames, [wire id u32][len u16][frame]... (wirec.h),
 * all integers in network byte order.
 */
#ifndef MESHWIRE_BATCHMSG_H
#define MESHWIRE_BATCHMSG_H
#include <stddef.h>
#include <stdint.h>

/* Room mw_batchmsg_header may need: the gRPC prefix, the tag and a 5-byte varint. */
enum { MW_BATCHMSG_HEADROOM = 11 };

/* Writes v as a protobuf varint (at most 10 bytes) into out; returns its length. */
size_t mw_varint(uint8_t *out, uint64_t v);

/* Writes the 5-byte gRPC prefix of an uncompressed message of msg_len bytes. */
void mw_grpc_prefix(uint8_t *out, uint32_t msg_len);

/* Writes into out the header of a message whose Batch carries frames_len bytes of
 * packed frames (1 <= frames_len <= 2^32 - 12); returns the header's length. The
 * message is that header followed by the frames, exactly what protobuf serializes. */
size_t mw_batchmsg_header(uint8_t *out, size_t frames_len);

/* Where the decoder hands each frame; `frame` is valid during the call only. */
typedef void (*mw_frame_sink)(void *ctx, uint32_t wire_id, const uint8_t *frame, size_t len);

typedef struct mw_batchdec mw_batchdec;

/* A decoder for one stream's bytes. NULL if out of memory. */
mw_batchdec *mw_batchdec_new(void);
void mw_batchdec_free(mw_batchdec *d);

/* Decodes the next `len` bytes of the stream, however they are split: every frame
 * completed by them goes to sink, in order, pointing into `data` when it lies whole
 * there and into the decoder's own copy otherwise (a frame split between calls).
 *
 * A message that breaks the format (compressed, a truncated or oversized field or
 * frame header, a protobuf wire type that cannot be skipped) is counted malformed
 * and the rest of it is skipped: frames before the fault were delivered, and the
 * next message is read normally since gRPC's length prefix marks where it starts.
 * Fields other than `frames` are skipped, as protobuf does with unknown fields;
 * several `frames` fields in one message are each decoded. Returns 0, or -1 if out
 * of memory for a split frame's copy (that frame is then dropped and counted malformed). */
int mw_batchdec_feed(mw_batchdec *d, const uint8_t *data, size_t len, mw_frame_sink sink,
                     void *ctx);

/* Messages decoded completely, and messages counted malformed. */
uint64_t mw_batchdec_messages(const mw_batchdec *d);
uint64_t mw_batchdec_malformed(const mw_batchdec *d);

#endif
