! hpc_refer_client.f90: the calls of hpc_refer_client.h for Fortran solvers (same protocol,
! same order of collectives). Every rank of the solver calls them:
!
!   use hpc_refer_client
!   type(hpc_refer_t) :: c
!   call hpc_refer_init(c, obs_dim, act_dim, low, high)      ! MPI_Init if needed
!   do
!     call hpc_refer_recv_action(c, action, seed, cmd)        ! action on every rank
!     if (cmd == HPC_REFER_STOP) exit
!     ... reset (cmd == HPC_REFER_RESET, step = 0) or advance (step = step + 1) ...
!     call hpc_refer_send_state(c, status, step, reward, state)   ! read on c%rank == 0
!   end do
!   call hpc_refer_finalize(c)
!
! c%comm holds this environment's ranks (use it instead of MPI_COMM_WORLD). Wire protocol
! and launch lines: solvers/README.md. Build with the MPI's Fortran wrapper (mpifort/mpif90);
! the pip Open MPI wheel ships none.
module hpc_refer_client
  use mpi
  implicit none
  private
  integer, parameter, public :: HPC_REFER_PROTOCOL = 1
  integer, parameter, public :: HPC_REFER_TAG_ASSIGN = 101, HPC_REFER_TAG_HELLO = 102, &
       HPC_REFER_TAG_BOUNDS = 103, HPC_REFER_TAG_STATE = 104, HPC_REFER_TAG_ACTION = 105, &
       HPC_REFER_TAG_RESET = 106, HPC_REFER_TAG_STOP = 107
  integer, parameter, public :: HPC_REFER_CONTINUE = 0, HPC_REFER_TERMINAL = 1, &
       HPC_REFER_TRUNCATED = 2
  integer, parameter, public :: HPC_REFER_RESET = 0, HPC_REFER_STEP = 1, HPC_REFER_STOP = 2

  type, public :: hpc_refer_t
     integer :: comm, rank, size      ! this environment's ranks
     integer :: env, envs
     integer :: obs_dim, act_dim
     integer :: peer, actor           ! MPI_COMM_WORLD or the parent intercommunicator
     integer :: app
     logical :: spawned = .false., owns_mpi = .false.
     double precision, allocatable :: buf(:)
  end type hpc_refer_t

  public :: hpc_refer_init, hpc_refer_recv_action, hpc_refer_send_state, hpc_refer_finalize

contains

  subroutine fail(msg)
    character(len=*), intent(in) :: msg
    integer :: ierr, wrank
    call MPI_Comm_rank(MPI_COMM_WORLD, wrank, ierr)
    write (0, '(a,i0,2a)') 'hpc_refer_client: error on world rank ', wrank, ': ', msg
    call MPI_Abort(MPI_COMM_WORLD, 2, ierr)
  end subroutine fail

  subroutine hpc_refer_init(c, obs_dim, act_dim, low, high)
    type(hpc_refer_t), intent(out) :: c
    integer, intent(in) :: obs_dim, act_dim
    double precision, intent(in) :: low(act_dim), high(act_dim)
    integer :: ierr, wrank, wsize, arank, asize, mine, parent, got
    integer :: head(2), msg(2), hello(4), st(MPI_STATUS_SIZE)
    integer(kind=MPI_ADDRESS_KIND) :: attr
    integer, allocatable :: apps(:), actors(:)
    logical :: flag, found, several
    call MPI_Initialized(flag, ierr)
    c%owns_mpi = .not. flag
    if (.not. flag) call MPI_Init(ierr)
    c%obs_dim = obs_dim
    c%act_dim = act_dim
    call MPI_Comm_rank(MPI_COMM_WORLD, wrank, ierr)
    call MPI_Comm_size(MPI_COMM_WORLD, wsize, ierr)
    call MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, attr, found, ierr)
    mine = 0
    if (found) mine = int(attr)
    allocate (apps(wsize))
    call MPI_Allgather(mine, 1, MPI_INTEGER, apps, 1, MPI_INTEGER, MPI_COMM_WORLD, ierr)
    several = any(apps /= apps(1))
    c%app = MPI_COMM_WORLD
    if (several) call MPI_Comm_split(MPI_COMM_WORLD, mine, wrank, c%app, ierr)
    call MPI_Comm_rank(c%app, arank, ierr)
    call MPI_Comm_size(c%app, asize, ierr)
    call MPI_Comm_get_parent(parent, ierr)
    if (parent /= MPI_COMM_NULL) then
       c%spawned = .true.
       c%peer = parent
       c%actor = 0
       head = [0, 1]
       if (arank == 0) call MPI_Recv(head, 2, MPI_INTEGER, 0, HPC_REFER_TAG_ASSIGN, parent, &
            MPI_STATUS_IGNORE, ierr)
       call MPI_Bcast(head, 2, MPI_INTEGER, 0, c%app, ierr)
       c%env = head(1)
       c%envs = head(2)
       call MPI_Comm_dup(c%app, c%comm, ierr)
    else if (several) then
       c%peer = MPI_COMM_WORLD
       if (arank == 0) then
          got = 0
          do
             call MPI_Recv(msg, 2, MPI_INTEGER, MPI_ANY_SOURCE, HPC_REFER_TAG_ASSIGN, &
                  MPI_COMM_WORLD, st, ierr)
             if (got == 0 .and. msg(2) > 0) then
                c%envs = msg(2)
                allocate (actors(c%envs))
                actors = -1
             end if
             if (.not. allocated(actors)) call fail('bad ASSIGN message')
             if (msg(2) /= c%envs .or. msg(1) < 0 .or. msg(1) >= c%envs) &
                  call fail('bad ASSIGN message')
             if (actors(msg(1) + 1) >= 0) call fail('bad ASSIGN message')
             actors(msg(1) + 1) = st(MPI_SOURCE)
             got = got + 1
             if (got == c%envs) exit
          end do
       end if
       call MPI_Bcast(c%envs, 1, MPI_INTEGER, 0, c%app, ierr)
       if (mod(asize, c%envs) /= 0 .and. arank == 0) &
            call fail('the solver ranks cannot be split into equal groups, one per actor')
       if (arank /= 0) allocate (actors(c%envs))
       call MPI_Bcast(actors, c%envs, MPI_INTEGER, 0, c%app, ierr)
       c%env = arank / (asize / c%envs)
       c%actor = actors(c%env + 1)
       call MPI_Comm_split(c%app, c%env, arank, c%comm, ierr)
    else
       call fail('not started by hpc_refer (see solvers/README.md for the launch lines)')
    end if
    call MPI_Comm_rank(c%comm, c%rank, ierr)
    call MPI_Comm_size(c%comm, c%size, ierr)
    if (c%rank == 0) then
       hello = [HPC_REFER_PROTOCOL, obs_dim, act_dim, c%size]
       call MPI_Send(hello, 4, MPI_INTEGER, c%actor, HPC_REFER_TAG_HELLO, c%peer, ierr)
       call MPI_Send([low, high], 2 * act_dim, MPI_DOUBLE_PRECISION, c%actor, &
            HPC_REFER_TAG_BOUNDS, c%peer, ierr)
       allocate (c%buf(3 + obs_dim))
    end if
  end subroutine hpc_refer_init

  subroutine hpc_refer_recv_action(c, action, seed, cmd)
    type(hpc_refer_t), intent(inout) :: c
    double precision, intent(inout) :: action(c%act_dim)
    integer, intent(out) :: seed, cmd
    integer :: head(2), st(MPI_STATUS_SIZE), ierr, dummy(1)
    head = [HPC_REFER_STOP, -1]
    if (c%rank == 0) then
       call MPI_Probe(c%actor, MPI_ANY_TAG, c%peer, st, ierr)
       select case (st(MPI_TAG))
       case (HPC_REFER_TAG_ACTION)
          call MPI_Recv(action, c%act_dim, MPI_DOUBLE_PRECISION, c%actor, st(MPI_TAG), &
               c%peer, MPI_STATUS_IGNORE, ierr)
          head(1) = HPC_REFER_STEP
       case (HPC_REFER_TAG_RESET)
          call MPI_Recv(head(2), 1, MPI_INTEGER, c%actor, st(MPI_TAG), c%peer, &
               MPI_STATUS_IGNORE, ierr)
          head(1) = HPC_REFER_RESET
       case (HPC_REFER_TAG_STOP)
          call MPI_Recv(dummy, 0, MPI_INTEGER, c%actor, st(MPI_TAG), c%peer, &
               MPI_STATUS_IGNORE, ierr)
       case default
          call fail('unexpected message tag from the actor')
       end select
    end if
    call MPI_Bcast(head, 2, MPI_INTEGER, 0, c%comm, ierr)
    if (head(1) == HPC_REFER_STEP) &
         call MPI_Bcast(action, c%act_dim, MPI_DOUBLE_PRECISION, 0, c%comm, ierr)
    cmd = head(1)
    seed = head(2)
  end subroutine hpc_refer_recv_action

  subroutine hpc_refer_send_state(c, status, step, reward, state)
    type(hpc_refer_t), intent(inout) :: c
    integer, intent(in) :: status, step
    double precision, intent(in) :: reward, state(*)
    integer :: ierr
    if (c%rank /= 0) return
    c%buf(1) = status
    c%buf(2) = step
    c%buf(3) = reward
    c%buf(4:) = state(1:c%obs_dim)
    call MPI_Send(c%buf, 3 + c%obs_dim, MPI_DOUBLE_PRECISION, c%actor, HPC_REFER_TAG_STATE, &
         c%peer, ierr)
  end subroutine hpc_refer_send_state

  subroutine hpc_refer_finalize(c)
    type(hpc_refer_t), intent(inout) :: c
    integer :: ierr
    if (allocated(c%buf)) deallocate (c%buf)
    call MPI_Comm_free(c%comm, ierr)
    if (c%spawned) call MPI_Comm_disconnect(c%peer, ierr)
    if (c%app /= MPI_COMM_WORLD) call MPI_Comm_free(c%app, ierr)
    if (c%owns_mpi) call MPI_Finalize(ierr)
  end subroutine hpc_refer_finalize

end module hpc_refer_client
