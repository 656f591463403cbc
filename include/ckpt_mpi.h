/*
 * ckpt_mpi.h — a ckpt_comm over MPI (libckpt_mpi).
 *
 * libckpt knows nothing of MPI: collective operations take a ckpt_comm, a
 * table of callbacks (see <ckpt_collective.h>).  This small
 * library, built when MPI is installed (Debian: libopenmpi-dev), makes one
 * from an MPI communicator:
 *
 *     ckpt_comm comm;
 *     ckpt_mpi_comm_create(MPI_COMM_WORLD, &comm, &err);
 *     ckpt_catalog_open_collective("model/", NULL, &comm, NULL, &cat, &err);
 *     ...
 *     ckpt_mpi_comm_free(&comm);
 *
 * Link with -lckpt_mpi -lckpt and MPI (mpicc).  Every operation runs as a
 * non-blocking MPI call (MPI_Ibcast, MPI_Iallgather, MPI_Ibarrier; votes
 * as point-to-point messages to rank 0) polled until done or until the
 * timeout, so that a rank that hangs makes the others fail with
 * CKPT_D_PEER_TIMEOUT naming it instead of waiting forever.  Errors are
 * returned (the duplicated communicator has MPI_ERRORS_RETURN).  After a
 * timeout the communicator holds an unfinished operation: end the job with
 * MPI_Abort (ckpt_mpi_comm_broken says so).
 *
 * The functions without MPI types (ckpt_mpi_world*) are also for programs
 * that load this library at run time without MPI's headers, such as the
 * ckpt command under mpirun (`ckpt convert --mpi`).
 */
#ifndef CKPT_MPI_H
#define CKPT_MPI_H

#include <mpi.h>

#include "ckpt_collective.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fills `comm` with a communicator over a duplicate of `mpi_comm` (the
 * caller's communicator is not used by ckpt).  MPI must be initialised
 * (any thread level: ckpt calls MPI from the calling thread only). */
CKPT_API ckpt_status ckpt_mpi_comm_create(MPI_Comm mpi_comm, ckpt_comm *comm, ckpt_error *err);

/* Non-zero when a call failed or timed out and MPI may hold unfinished
 * operations: the job should end with MPI_Abort. */
CKPT_API int ckpt_mpi_comm_broken(const ckpt_comm *comm);

/* Releases what ckpt_mpi_comm_create made (the duplicate communicator,
 * unless broken).  Accepts a zeroed comm. */
CKPT_API void ckpt_mpi_comm_free(ckpt_comm *comm);

/* Initialises MPI when it is not (MPI_Init_thread, MPI_THREAD_FUNNELED)
 * and makes a communicator over MPI_COMM_WORLD. */
CKPT_API ckpt_status ckpt_mpi_world(ckpt_comm *comm, ckpt_error *err);

/* Frees the communicator and ends MPI: MPI_Finalize (if ckpt_mpi_world
 * initialised it), or MPI_Abort(MPI_COMM_WORLD, exit_code) when the
 * communicator is broken — a rank died or hangs, and the job cannot end
 * cleanly.  Returns only when MPI_Finalize was called or not needed. */
CKPT_API void ckpt_mpi_world_end(ckpt_comm *comm, int exit_code);

#ifdef __cplusplus
}
#endif

#endif /* CKPT_MPI_H */
