/* Constants of the coupprof logger protocol, version 1 (firmware/PROTOCOL.md). */
#ifndef CP_PROTOCOL_H
#define CP_PROTOCOL_H

#define CP_PROTOCOL_VERSION 1u

#define CP_SYNC0 0xA5u
#define CP_SYNC1 0x5Au

/* device -> host frame types */
#define CP_T_SAMPLES 0x01u
#define CP_T_EDGE 0x02u
#define CP_T_IDENT 0x03u
#define CP_T_ACK 0x04u
#define CP_T_STATUS 0x05u

/* host -> device commands */
#define CP_CMD_IDENTIFY 0x81u
#define CP_CMD_START 0x82u
#define CP_CMD_STOP 0x83u
#define CP_CMD_SET_RATE 0x84u
#define CP_CMD_SET_CAL 0x85u

/* ACK status */
#define CP_ACK_OK 0u
#define CP_ACK_BAD_CRC 1u
#define CP_ACK_UNKNOWN 2u
#define CP_ACK_BAD_ARG 3u
#define CP_ACK_BUSY 4u

/* IDENT front_end */
#define CP_FE_INA226 1u
#define CP_FE_A0 2u
#define CP_FE_SYNTHETIC 3u

/* IDENT flags */
#define CP_FLAG_STREAMING 0x01u
#define CP_FLAG_BUS_MEASURED 0x02u

/* sizes */
#define CP_FRAME_OVERHEAD 12u /* sync(2) type len seq(2) t_us(4) crc(2) */
#define CP_CMD_OVERHEAD 6u    /* sync(2) cmd len crc(2) */
#define CP_SAMPLES_MAX 4u
#define CP_SAMPLE_BYTES 7u
#define CP_SAMPLES_FRAME_MAX (CP_FRAME_OVERHEAD + 1u + CP_SAMPLE_BYTES * CP_SAMPLES_MAX) /* 41 */
#define CP_EDGE_LEN 2u
#define CP_IDENT_LEN 30u
#define CP_ACK_LEN 2u
#define CP_STATUS_LEN 12u
#define CP_FW_VERSION_LEN 8u

#endif
